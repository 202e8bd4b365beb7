#!/usr/bin/env bash
# Build detd, detctl and libdetd here and gather them, with every shared
# library they need except glibc's own, into .gpu/ (git-ignored), so a GPU
# machine without the Debian packages can run them:
#   LD_LIBRARY_PATH=.gpu/lib .gpu/bin/detd ...
# The GPU machine's glibc must be at least this machine's (2.36).
set -euo pipefail
REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
BUILD=${DETD_BUILD_DIR:-$REPO/build}
OUT=$REPO/.gpu
cmake -S "$REPO" -B "$BUILD" -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
cmake --build "$BUILD" -j2 --target detd_daemon detctl detd >/dev/null
rm -rf "$OUT"
mkdir -p "$OUT/bin" "$OUT/lib"
cp "$BUILD/daemon/detd" "$BUILD/client/detctl" "$OUT/bin/"
cp -L "$BUILD/client/libdetd.so" "$OUT/lib/libdetd.so"
cp -L "$BUILD/client/libdetd.so.0" "$OUT/lib/libdetd.so.0"
for bin in "$OUT/bin/detd" "$OUT/bin/detctl" "$OUT/lib/libdetd.so"; do
    ldd "$bin" | awk '/=> \//{print $3}'
done | sort -u | while read -r lib; do
    case "$(basename "$lib")" in
        libc.so*|libm.so*|libpthread.so*|libdl.so*|librt.so*|ld-linux*|libresolv.so*) ;;
        *) cp -L "$lib" "$OUT/lib/" ;;
    esac
done
strip --strip-unneeded "$OUT"/lib/*.so* "$OUT"/bin/* 2>/dev/null || true
du -sh "$OUT"
