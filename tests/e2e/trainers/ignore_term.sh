#!/bin/sh
# Fake trainer that ignores SIGTERM (its children inherit SIG_IGN), so only SIGKILL stops it.
trap '' TERM
echo "rank $RANK ready pid $$ (ignoring SIGTERM)"
sleep 600
echo "rank $RANK: sleep ended"
exit 1
