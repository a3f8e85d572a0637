# Shared by the exl integration tests (sourced): a real exld on a private
# socket, started and stopped by the test, and small checks.
#   needs: $exld $exl (paths), EXLD_MODELS from meson's test_env

models=${EXLD_MODELS:-}
if [ -z "$models" ] || [ ! -f "$models/stories260K.gguf" ]; then
	echo "EXLD_MODELS ('$models') has no stories260K.gguf; skipping"
	exit 77
fi
tmp=$(mktemp -d /tmp/exl-test-XXXXXX)
sock=$tmp/exld.sock
export EXLD_SOCKET=$sock
fpid=
. "$(dirname "$0")/sh_common.sh"

cleanup() {
	stop_daemon
	stop_fake
	if [ "$fail" != 0 ] && [ -f "$tmp/daemon.log" ]; then
		echo "--- daemon log"
		tail -n 30 "$tmp/daemon.log"
	fi
	rm -rf "$tmp"
}
trap cleanup EXIT
trap 'exit 1' INT TERM

# start_fake SOCKET [fake_exld.py flags]: tests/integration/fake_exld.py
# (a stand-in daemon) on SOCKET, logging each request's op to SOCKET.log.
start_fake() {
	stop_fake
	fsock=$1
	shift
	rm -f "$fsock" "$fsock.log"
	python3 "$(dirname "$0")/fake_exld.py" "$fsock" "$fsock.log" "$@" >>"$tmp/fake.out" 2>&1 &
	fpid=$!
	i=0
	while [ $i -lt 100 ]; do
		[ -S "$fsock" ] && return 0
		kill -0 "$fpid" 2>/dev/null || break
		sleep 0.1
		i=$((i + 1))
	done
	echo "fake_exld.py did not start: $(cat "$tmp/fake.out")"
	return 1
}

stop_fake() {
	[ -n "$fpid" ] || return 0
	kill -TERM "$fpid" 2>/dev/null
	wait "$fpid" 2>/dev/null
	fpid=
}

# start_daemon NAME[,NAME...] [extra exld flags]: exld on $sock with the test
# models, returning once every named model is loaded.
start_daemon() {
	load=$1
	shift
	"$exld" --config /dev/null --socket "$sock" --models "$models" --threads 1 \
		--load "$load" "$@" >>"$tmp/daemon.log" 2>&1 &
	dpid=$!
	i=0
	while [ $i -lt 300 ]; do
		if ! kill -0 "$dpid" 2>/dev/null; then
			echo "exld exited at start:"
			cat "$tmp/daemon.log"
			dpid=
			return 1
		fi
		"$exl" models >"$tmp/models.list" 2>/dev/null
		all=1
		for m in $(echo "$load" | tr ',' ' '); do
			grep -q "^$m  *loaded" "$tmp/models.list" || all=0
		done
		[ $all = 1 ] && return 0
		sleep 0.1
		i=$((i + 1))
	done
	echo "exld did not load $load within 30 s"
	return 1
}

# expected PROMPT N [exld run flags]: what `exld run` prints (prompt +
# completion + newline), greedy, one thread.
expected() {
	p=$1
	n=$2
	shift 2
	"$exld" run --model "$models/stories260K.gguf" --prompt "$p" -n "$n" --temperature 0 \
		--threads 1 "$@" 2>/dev/null
}
