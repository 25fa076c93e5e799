<?php
// A PHP page under espalier's FastCGI transport: who answered, and where it runs.
header('X-App-Pid: ' . getmypid());
if ($_SERVER['REQUEST_METHOD'] === 'POST') {
    echo 'posted ' . strlen(file_get_contents('php://input')) . " bytes\n";
    exit;
}
if (isset($_GET['missing'])) {
    http_response_code(404);
    echo "nothing here\n";
    exit;
}
if (isset($_GET['away'])) {
    header('Location: /elsewhere');
    exit;
}
if (isset($_GET['big'])) {
    echo str_repeat('p', 1 << 20);
    exit;
}
printf(
    "hello from PHP %s pid %d, espalier worker %s, node %s, script %s, path info %s, host %s\n",
    PHP_VERSION,
    getmypid(),
    getenv('ESPALIER_WORKER'),
    getenv('ESPALIER_NODE'),
    $_SERVER['SCRIPT_NAME'],
    $_SERVER['PATH_INFO'] ?? '',
    $_SERVER['HTTP_HOST'] ?? ''
);
