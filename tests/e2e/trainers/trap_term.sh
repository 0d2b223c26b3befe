#!/bin/sh
# Fake trainer that handles SIGTERM: prints "rank R got SIGTERM" and exits 143.
trap 'echo "rank $RANK got SIGTERM"; exit 143' TERM
echo "rank $RANK ready pid $$"
sleep 600 &
wait $!
echo "rank $RANK: sleep ended without a signal"
exit 1
