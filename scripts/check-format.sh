#!/usr/bin/env bash
# Fail if any C source or header differs from what clang-format makes of it.
set -euo pipefail
REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$REPO"
bad=0
while IFS= read -r f; do
    if ! clang-format --style=file "$f" | cmp -s - "$f"; then
        echo "format: $f differs from clang-format (run: clang-format -i $f)"
        bad=1
    fi
done < <(git ls-files '*.c' '*.h')
exit $bad
