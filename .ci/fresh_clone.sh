#!/usr/bin/env bash
# The check before an issue is called resolved: a clean clone of HEAD in a fresh venv runs the README's two
# set-up commands, the main job and then `.ci/run` (which runs the test command). Times and the tail of each
# go to $DIR.report.txt. As CI lays it out, the clone has the checkout's shared/ (the benchmark files that no
# registry serves) beside it, linked read-only. Timings mean something only with nothing else on the cores
# (torch's threads, oversubscribed, run several times slower).
# Usage: .ci/fresh_clone.sh [DIR]   (default /tmp/fresh-clone)
set -uo pipefail
SRC=$(git -C "$(dirname "$0")" rev-parse --show-toplevel)
DIR=${1:-/tmp/fresh-clone}
rm -rf "$DIR" && git clone -q "$SRC" "$DIR/lopd" || exit 1
[ -d "$SRC/../shared" ] && ln -s "$(cd "$SRC/../shared" && pwd)" "$DIR/shared"
cd "$DIR/lopd" || exit 1
python3 -m venv "$DIR/venv" && . "$DIR/venv/bin/activate"
{
  echo "commit $(git rev-parse --short HEAD)  $(date -u +%FT%T)"
  t0=$(date +%s)
  # README, "Set-up", first command:
  pip install -q torch==2.13.0 -e ".[train]" > "$DIR/pip.log" 2>&1 && lopd-train --config examples/smollm2_bfcl_lopd.toml > "$DIR/main_job.log" 2>&1
  echo "main job rc $? in $(( $(date +%s) - t0 )) s"; tr '\r' '\n' < "$DIR/main_job.log" | grep -oE "(held-out|training tasks) after .*"
  t1=$(date +%s)
  CI=true bash .ci/run > "$DIR/ci.log" 2>&1 < /dev/null
  echo ".ci/run rc $? in $(( $(date +%s) - t1 )) s"; grep -E "^=+ .*(passed|failed)" "$DIR/ci.log"
} > "$DIR.report.txt" 2>&1
cat "$DIR.report.txt"
