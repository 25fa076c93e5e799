<?php
// A front controller, as WordPress, Laravel and Symfony have: every path that is neither a
// script nor a file comes here, its original URI in REQUEST_URI.
$uri = $_SERVER['REQUEST_URI'];
$path = parse_url($uri, PHP_URL_PATH);
header('Content-Type: text/plain; charset=utf-8');
header('X-Powered-By: php-router');  // taken out by the site's headers
if ($path === '/') {
    echo "home\n";
} elseif (preg_match('#^/articles/([a-z0-9-]+)/$#', $path, $m)) {
    echo "article {$m[1]}\n";
} elseif ($path === '/api/echo') {
    echo $_SERVER['REQUEST_METHOD'] . ' ' . file_get_contents('php://input') . "\n";
} else {
    http_response_code(404);
    echo "no route for {$path}\n";
}
echo 'front: REQUEST_URI=' . $uri
    . ' SCRIPT_NAME=' . $_SERVER['SCRIPT_NAME']
    . ' PATH_INFO=' . ($_SERVER['PATH_INFO'] ?? '')
    . ' QUERY_STRING=' . ($_SERVER['QUERY_STRING'] ?? '') . "\n";
