#!/bin/sh
# test-deps.sh installs what the test suite needs beyond Go: Debian's chromium package, which
# the web UI's browser test (services/history/webui, TestUIBrowser) drives headless. It returns
# at once when chromium is on PATH already. Installing needs root (or sudo) and apt-get; it runs
# apt-get update first, non-interactively. `make test` runs it, then sets FLOW_REQUIRE_BROWSER=1
# so that the browser test fails instead of skipping when chromium is missing.
set -eu

if command -v chromium >/dev/null 2>&1; then
	exit 0
fi
if ! command -v apt-get >/dev/null 2>&1; then
	echo "test-deps: chromium is not installed and there is no apt-get here; install Chromium and put 'chromium' on PATH" >&2
	exit 1
fi
SUDO=
if [ "$(id -u)" -ne 0 ]; then
	if ! command -v sudo >/dev/null 2>&1; then
		echo "test-deps: installing chromium needs root: run 'apt-get install chromium' as root, or run this as root" >&2
		exit 1
	fi
	SUDO="sudo -n"
fi
echo "test-deps: installing Debian's chromium package (for the web UI's browser test)" >&2
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends chromium fonts-dejavu-core >/dev/null
command -v chromium >/dev/null 2>&1 || { echo "test-deps: chromium was installed but is not on PATH" >&2; exit 1; }
