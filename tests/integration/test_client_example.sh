#!/bin/sh
# libexlclient as a user gets it: `meson install --destdir` into a temporary
# tree, the shared library's soname and the static library there, the
# example program of docs/client.md extracted and built with pkg-config
# against that tree (shared, then static), and both builds run against a
# real daemon, giving stories260K's known continuation blocking and streamed.
set -u
exld=${1:?usage: test_client_example.sh EXLD EXL CLIENT_MD}
exl=${2:?usage: test_client_example.sh EXLD EXL CLIENT_MD}
doc=${3:?usage: test_client_example.sh EXLD EXL CLIENT_MD}
build=${EXLD_BUILDDIR:?EXLD_BUILDDIR is not set (run through meson test)}
. "$(dirname "$0")/exl_common.sh"

known="Once upon a time, there was a little girl named Lily. She loved to play outside in the park. One day, she saw a big, red ball."
dest=$tmp/dest

# ---- install ----
if ! meson install -C "$build" --no-rebuild --destdir "$dest" >"$tmp/install.log" 2>&1; then
	cat "$tmp/install.log"
	echo "FAIL: meson install --destdir (is the whole build dir built?)"
	exit 1
fi
pc=$(find "$dest" -name exlclient.pc | head -n 1)
[ -n "$pc" ] || { echo "FAIL: no exlclient.pc installed"; exit 1; }
libdir=$(dirname "$(dirname "$pc")")
for f in "$libdir/libexlclient.so" "$libdir/libexlclient.a" \
	"$(find "$dest" -path '*/include/exld/exlclient.h')" \
	"$(find "$dest" -path '*/include/exld/exl_wire.h')"; do
	[ -n "$f" ] && [ -e "$f" ] && ok "installed $(basename "$f")" || bad "not installed: $f"
done
soname=$(readelf -d "$libdir/libexlclient.so" 2>/dev/null | sed -n 's/.*Library soname: \[\(.*\)\]/\1/p')
[ "$soname" = "libexlclient.so.0" ] && [ -e "$libdir/libexlclient.so.0" ] &&
	ok "soname libexlclient.so.0" || bad "soname: '$soname'"
# Only the API is exported.
readelf --dyn-syms -W "$libdir/libexlclient.so" | awk '$5 == "GLOBAL" && $7 != "UND" { print $8 }' |
	sed 's/@.*//' >"$tmp/syms"
grep -qv '^exl_' "$tmp/syms" && bad "exports beyond exl_*: $(grep -v '^exl_' "$tmp/syms" | head)" ||
	ok "exports only exl_* ($(wc -l <"$tmp/syms") symbols)"
grep -qx exl_cl_fail "$tmp/syms" && bad "internal exl_cl_* exported" || ok "internals hidden"

# ---- the example, as the documentation writes it ----
sed -n '/^<!-- example.c begin -->$/,/^<!-- example.c end -->$/p' "$doc" | sed '1,2d;$d' |
	sed '$d' >"$tmp/example.c"
[ "$(wc -l <"$tmp/example.c")" -gt 20 ] || { echo "FAIL: no example in $doc"; exit 1; }
export PKG_CONFIG_PATH="$libdir/pkgconfig" PKG_CONFIG_SYSROOT_DIR="$dest"
flags=$(pkg-config --cflags --libs exlclient) || { echo "FAIL: pkg-config exlclient"; exit 1; }
case "$flags" in *"$dest"*) ok "pkg-config points into the installed tree" ;;
*) bad "pkg-config flags outside $dest: $flags" ;; esac
cc=${CC:-cc}
# A sanitizer build's library needs its runtime linked into the program.
san=
readelf -d "$libdir/libexlclient.so" | grep -q 'NEEDED.*libasan' && san="$san -fsanitize=address"
readelf -d "$libdir/libexlclient.so" | grep -q 'NEEDED.*libubsan' && san="$san -fsanitize=undefined"
[ -z "$san" ] || echo "the library is built with$san: the example is too"
# shellcheck disable=SC2086 # the flags are words
if $cc -std=c11 -Wall -Wextra -Werror $san -o "$tmp/example" "$tmp/example.c" $flags 2>"$tmp/cc.log"; then
	ok "example builds with pkg-config (shared)"
else
	cat "$tmp/cc.log"
	bad "example does not build"
fi
static_flags="$(pkg-config --cflags exlclient) $libdir/libexlclient.a $(pkg-config --libs msgpack-c 2>/dev/null || pkg-config --libs msgpack)"
# shellcheck disable=SC2086
if $cc -std=c11 -Wall -Wextra -Werror $san -o "$tmp/example-static" "$tmp/example.c" $static_flags \
	2>"$tmp/cc.log"; then
	ok "example builds against libexlclient.a"
else
	cat "$tmp/cc.log"
	bad "example does not build statically"
fi
ldd "$tmp/example-static" 2>/dev/null | grep -q libexlclient && bad "static build uses the .so"

# ---- the installed header, library and .pc agree on the version ----
cat >"$tmp/version.c" <<'EOF'
#include <stdio.h>
#include <string.h>
#include <exlclient.h>
int main(void)
{
	printf("%s %s\n", EXLCLIENT_VERSION_STRING, exl_version());
	return strcmp(EXLCLIENT_VERSION_STRING, exl_version()) != 0;
}
EOF
# shellcheck disable=SC2086
if $cc -std=c11 -Wall -Wextra -Werror $san -o "$tmp/version" "$tmp/version.c" $flags 2>"$tmp/cc.log"; then
	v=$(LD_LIBRARY_PATH="$libdir" "$tmp/version")
	rc=$?
	pcv=$(pkg-config --modversion exlclient)
	[ $rc = 0 ] && [ "$v" = "$pcv $pcv" ] &&
		ok "header, library and exlclient.pc say version $pcv" ||
		bad "versions: header and library '$v' (rc $rc), exlclient.pc '$pcv'"
else
	cat "$tmp/cc.log"
	bad "the version check does not build"
fi

# ---- and runs ----
start_daemon stories260K || { bad "daemon start"; exit 1; }
printf 'blocking: %s [max_new_tokens, 40 tokens]\nstreaming: %s [max_new_tokens]\n' "$known" \
	"$known" >"$tmp/want"
LD_LIBRARY_PATH="$libdir" "$tmp/example" >"$tmp/out" 2>"$tmp/err"
rc=$?
[ $rc = 0 ] && cmp -s "$tmp/out" "$tmp/want" && ok "example runs (shared)" ||
	bad "example: rc $rc: $(cat "$tmp/out" "$tmp/err")"
LD_LIBRARY_PATH="$libdir" ldd "$tmp/example" | grep -q "$libdir/libexlclient.so.0" &&
	ok "example loads the installed libexlclient.so.0" || bad "ldd: $(ldd "$tmp/example")"
"$tmp/example-static" stories260K >"$tmp/out" 2>"$tmp/err"
rc=$?
[ $rc = 0 ] && cmp -s "$tmp/out" "$tmp/want" && ok "example runs (static, -m stories260K)" ||
	bad "static example: rc $rc: $(cat "$tmp/out" "$tmp/err")"
"$tmp/example-static" nosuch >"$tmp/out" 2>"$tmp/err"
[ $? = 1 ] && has "$tmp/err" "(unknown_model)" && ok "example reports an unknown model" ||
	bad "example, unknown model: $(cat "$tmp/err")"
stop_daemon
"$tmp/example-static" >/dev/null 2>"$tmp/err"
[ $? = 1 ] && has "$tmp/err" "cannot connect to exld" && ok "example without a daemon" ||
	bad "example without daemon: $(cat "$tmp/err")"

exit $fail
