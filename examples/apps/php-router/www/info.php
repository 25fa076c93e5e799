<?php
header('Content-Type: text/plain; charset=utf-8');
echo 'info: SCRIPT_NAME=' . $_SERVER['SCRIPT_NAME'] . ' PATH_INFO=' . ($_SERVER['PATH_INFO'] ?? '') . "\n";
