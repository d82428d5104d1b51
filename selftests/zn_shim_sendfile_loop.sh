#!/bin/bash
# SPDX-License-Identifier: GPL-2.0
# Reproducer of the (now fixed) zero-copy sendfile stall (docs/shim.md,
# "Known limits" 6); not part of make check. Runs the zero-copy half of
# zn_shim.sh's sendfile case (zn_shim_sendfile.py, both ends under the
# shim) N times (default 20) and, when a client has not finished after
# 20 s, prints both ends' TCP state (ss -tnioe, nstat), the processes'
# kernel stacks, the NIC's counters, the shim's logs, 3 s of the client's
# system calls (strace), then pings across the ports and says whether the
# client resumed. It stalled in about one run of 150 before the fix, with one host
# core kept busy beside the guest:
#   qemu/run --topology two-port --cpus 1 -- env N=200 selftests/zn_shim_sendfile_loop.sh
# (TRACE=1 adds tracepoints of the last run to what a hang prints).
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/net_lib.sh"
zn_load
zn_net_start 12
SHIM=$ZN_ROOT/target/release/libzn_shim.so
PERF=$ZN_ROOT/target/release/zn-perf
T=$ZN_ROOT/selftests/zn_shim_sendfile.py
D=/tmp/sfl; mkdir -p $D
head -c $(((3 << 20) + 4321)) /dev/urandom >$D/sf.in
# TRACE=1: record TCP's sendmsg and receive tracepoints and the workqueue's
# (the flow's send-space work item) for each run, printed at a hang.
TR=/sys/kernel/tracing
if [ "${TRACE:-0}" = 1 ]; then
	[ -d $TR/events ] || mount -t tracefs nodev $TR
	echo 16384 >$TR/buffer_size_kb
	for e in tcp/tcp_sendmsg_locked tcp/tcp_probe workqueue/workqueue_queue_work workqueue/workqueue_execute_start; do
		echo 1 >$TR/events/$e/enable
	done
fi
for i in $(seq ${N:-20}); do
	port=$((6000 + i))
	[ "${TRACE:-0}" = 1 ] && echo >$TR/trace
	zn_pfx b
	"${ZN_PFX[@]}" env LD_PRELOAD="$SHIM" ZN_SHIM_STATS=$D/srv.stats ZN_SHIM_LOG=$D/srv.log python3 $T server $ZN_ADDR_B $port >$D/srv.out 2>&1 &
	spid=$!
	zn_wait_listen b $port $spid
	zn_pfx a
	"${ZN_PFX[@]}" env LD_PRELOAD="$SHIM" ZN_SHIM_STATS=$D/cli.stats ZN_SHIM_LOG=$D/cli.log python3 $T client $ZN_ADDR_B $port $D/sf.in >$D/cli.out 2>&1 &
	cpid=$!
	t0=$SECONDS
	while kill -0 $cpid 2>/dev/null && [ $((SECONDS - t0)) -lt 20 ]; do zn_nap 0.5; done
	if kill -0 $cpid 2>/dev/null; then
		echo "=== run $i HUNG after $((SECONDS - t0)) s"
		for n in zn-a zn-b; do echo "--- ss $n"; ip netns exec $n ss -tnioem; done
		for n in zn-a zn-b; do echo "--- nstat $n"; ip netns exec $n nstat -az | grep -E "TCPTimeouts|WinProbe|ZeroWindow|Retrans|Probe|Backlog|OFO|DelayedACK|Prune|Drop|Collapse|RcvQ|Memory" | grep -v " 0 "; done
		for p in $(pgrep -f zn_shim_sendfile.py); do echo "--- pid $p $(tr '\0' ' ' </proc/$p/cmdline)"; for t in /proc/$p/task/*; do echo "task $t: $(cat $t/wchan) $(cat $t/syscall)"; cat $t/stack; done; done
		echo "--- query"; $PERF query 2>&1 | head -40
		echo "--- ethtool"; for n in zn-a zn-b; do ip netns exec $n ethtool -S $( [ $n = zn-a ] && echo $ZN_IF_A || echo $ZN_IF_B) | grep -v ": 0$" | head -80; done
		echo "--- logs"; grep -h "waiting" $D/cli.log; tail -3 $D/cli.log
		echo "--- dmesg"; dmesg | tail -20
		# A send's ubuf_info whose reference was lost, or an skb nothing
		# points to any more, shows up here.
		echo "--- kmemleak"; zn_kmemleak_check && echo "no leaks"
		if [ "${TRACE:-0}" = 1 ]; then
			echo 0 >$TR/tracing_on
			echo "--- trace: $(grep -vc '^#' $TR/trace) events, the last 400"
			grep -v '^#' $TR/trace | tail -400
		fi
		echo "--- strace client"; timeout 3 strace -p $cpid -e trace=ioctl,poll,read,write 2>&1 | head -30
		echo "--- ping from b to a"; ip netns exec zn-b ping -c 2 -i 0.5 $ZN_ADDR_A | tail -2
		t1=$SECONDS; while kill -0 $cpid 2>/dev/null && [ $((SECONDS - t1)) -lt 10 ]; do zn_nap 0.5; done
		if kill -0 $cpid 2>/dev/null; then echo "STILL HUNG after ping"; else echo "RESUMED after ping"; fi
		for n in zn-a zn-b; do echo "--- ss $n"; ip netns exec $n ss -tnioe | grep -o "bytes_sent:[0-9]*\|bytes_acked:[0-9]*\|bytes_received:[0-9]*" | tr "\n" " "; echo; done
		kill -TERM $(pgrep -f zn_shim_sendfile.py); zn_nap 2
		cat $D/srv.out $D/cli.out; cat $D/srv.stats $D/cli.stats 2>/dev/null | tr '\n' ' '
		exit 1
	fi
	wait $cpid; rc=$?
	wait $spid
	echo "run $i: rc $rc $((SECONDS - t0)) s: $(head -c 150 $D/cli.out | tr '\n' ' ') / $(cat $D/srv.out)"
done
