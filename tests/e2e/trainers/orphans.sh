#!/bin/sh
# Fake trainer that leaves orphans to PID 1:
#  * 50 short-lived grandchildren: `(sleep 0.2 &)` exits the subshell at once, so each
#    sleep is re-parented to PID 1, which must reap it (or it stays a zombie);
#  * one daemon (setsid + double fork) that outlives this worker, keeps our stdout open,
#    appends "daemon got SIGTERM" to MARKER when it gets SIGTERM and otherwise ignores it.
# Then it waits LINGER seconds and exits 0.
# usage: orphans.sh MARKER LINGER
marker=$1 linger=$2
for i in $(seq 50); do (sleep 0.2 &); done
(setsid sh -c 'trap "echo daemon got SIGTERM >> \"$1\"" TERM
               echo "daemon $$ alive (session leader)"
               while :; do sleep 0.2 & wait $!; done' daemon "$marker" &)
echo "rank $RANK spawned orphans"
sleep "$linger"
echo "rank $RANK exiting 0"
exit 0
