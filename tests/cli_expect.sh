#!/usr/bin/env bash
# Runs a strata command and checks its exit code, that stderr contains a
# text, and that stdout is empty (bad input leaves no partial output).
#   cli_expect.sh EXPECTED_RC EXPECTED_STDERR_TEXT -- COMMAND ARGS...
set -u
want_rc=$1
want_err=$2
shift 3
out=$(mktemp)
err=$(mktemp)
trap 'rm -f "$out" "$err"' EXIT
"$@" >"$out" 2>"$err"
rc=$?
ok=1
if [ "$rc" -ne "$want_rc" ]; then
  echo "exit code $rc, expected $want_rc"
  ok=0
fi
if ! grep -qF -- "$want_err" "$err"; then
  echo "stderr lacks: $want_err"
  ok=0
fi
if [ "$want_rc" -ne 0 ] && [ -s "$out" ]; then
  echo "stdout is not empty on error"
  ok=0
fi
if [ $ok -eq 0 ]; then
  echo "--- command: $*"
  echo "--- stdout:"; head -c 2000 "$out"
  echo "--- stderr:"; cat "$err"
  exit 1
fi
exit 0
