# The small checks every shell test of a real exld shares (sourced):
# ok / bad (which sets fail=1), has FILE TEXT, and stop_daemon for the
# daemon whose pid is in $dpid.
dpid=
fail=0

ok() { printf 'ok: %s\n' "$1"; }
bad() { printf 'FAIL: %s\n' "$1"; fail=1; }
# has FILE TEXT: fixed-string search
has() { grep -qF -- "$2" "$1"; }

stop_daemon() {
	[ -n "$dpid" ] || return 0
	kill -TERM "$dpid" 2>/dev/null
	wait "$dpid" 2>/dev/null
	dpid=
}
