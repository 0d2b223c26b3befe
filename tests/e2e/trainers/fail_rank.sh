#!/bin/sh
# Fake trainer: rank FAIL_RANK exits FAIL_CODE after FAIL_AFTER seconds; every other rank
# runs LIVE seconds and exits 0, or, on SIGTERM, says so and exits 143.
# usage: fail_rank.sh FAIL_RANK FAIL_CODE FAIL_AFTER LIVE
fail_rank=$1 fail_code=$2 fail_after=$3 live=$4
echo "rank $RANK of $WORLD_SIZE (local $LOCAL_RANK, group $GROUP_RANK) pid $$ master $MASTER_ADDR:$MASTER_PORT"
if [ "$RANK" = "$fail_rank" ]; then
    sleep "$fail_after"
    echo "rank $RANK failing with $fail_code" >&2
    exit "$fail_code"
fi
trap 'echo "rank $RANK got SIGTERM"; exit 143' TERM
sleep "$live" &
wait $!   # returns early when a trapped signal arrives (POSIX sh `wait`)
echo "rank $RANK done"
