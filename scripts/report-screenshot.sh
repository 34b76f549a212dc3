#!/usr/bin/env bash
# Renders a report.html to a PNG with headless Chromium, for people to look
# at the charts (docs/report.md). Usage:
#   scripts/report-screenshot.sh DIR/report.html [OUT.png] [WIDTH] [HEIGHT]
# Defaults: OUT.png beside the report (report.png), 1000 x 4000 pixels.
set -euo pipefail

html=${1:?usage: report-screenshot.sh REPORT.html [OUT.png] [WIDTH] [HEIGHT]}
out=${2:-"$(dirname "$html")/report.png"}
width=${3:-1000}
height=${4:-4000}

browser=""
for b in chromium chromium-browser google-chrome; do
  if command -v "$b" >/dev/null; then browser=$b; break; fi
done
[ -n "$browser" ] || { echo "report-screenshot: no chromium (scripts/setup.sh installs it)" >&2; exit 1; }

abs_html=$(cd "$(dirname "$html")" && pwd)/$(basename "$html")
abs_out=$(cd "$(dirname "$out")" && pwd)/$(basename "$out")
profile=$(mktemp -d)
trap 'rm -rf "$profile"' EXIT
"$browser" --headless --no-sandbox --disable-gpu --hide-scrollbars --user-data-dir="$profile" \
  --window-size="$width,$height" --screenshot="$abs_out" "file://$abs_html" 2>/dev/null
[ -s "$abs_out" ] || { echo "report-screenshot: no image written" >&2; exit 1; }
echo "$abs_out"
