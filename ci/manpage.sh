#!/usr/bin/env bash
# The man page against the provider: every variable oxmr defines with
# fi_param_define (as `fi_info -p oxmr -e` lists them, through the real
# libfabric) must be in man/fi_oxmr.7, and the page must name no FI_OXMR_*
# variable that does not exist. Also renders the page (groff, warnings are
# failures).
#
# usage: ci/manpage.sh <dir-containing-liboxmr-fi.so>
set -euo pipefail
cd "$(dirname "$0")/.."
dir="$(cd "${1:?usage: ci/manpage.sh <dir-containing-liboxmr-fi.so>}" && pwd)"
page=man/fi_oxmr.7

# (Captured first: grep -q would stop reading early, and under pipefail the
# writer's SIGPIPE would fail the check.)
defined="$(FI_PROVIDER_PATH="$dir" fi_info -p oxmr -e | tr -d '\0' | grep -o '^# FI_OXMR_[A-Z0-9_]*' | cut -c3- | sort -u)"
[ -n "$defined" ] || { echo "ci/manpage.sh: fi_info -p oxmr -e lists no FI_OXMR_ variable" >&2; exit 1; }
named="$(grep -o 'FI_OXMR_[A-Z0-9_]*' "$page" | sort -u)"

missing="$(comm -23 <(echo "$defined") <(echo "$named"))"
unknown="$(comm -13 <(echo "$defined") <(echo "$named"))"
if [ -n "$missing" ]; then
	echo "ci/manpage.sh: defined with fi_param_define but missing from $page:" >&2
	echo "$missing" | sed 's/^/  /' >&2
fi
if [ -n "$unknown" ]; then
	echo "ci/manpage.sh: named in $page but not defined by oxmr:" >&2
	echo "$unknown" | sed 's/^/  /' >&2
fi
[ -z "$missing$unknown" ] || exit 1

warnings="$(groff -man -Tutf8 -ww -z "$page" 2>&1)"
[ -z "$warnings" ] || { echo "ci/manpage.sh: groff warns on $page:" >&2; echo "$warnings" >&2; exit 1; }
echo "ci/manpage.sh: $page documents all $(echo "$defined" | wc -l) FI_OXMR_* variables, and no other; renders without warnings"
