#!/bin/bash
# H200, final build of issue 6: compute-sanitizer racecheck and synccheck over the whole conformance
# grid with the default chooser (each tool under a time limit; the log says how far it got)
B=/tmp/b; mkdir -p $B; xz -dc .deps/pk/bins.tar.xz | tar xf - -C $B
export LD_LIBRARY_PATH=$B/lib
date -u
timeout 200 compute-sanitizer --tool synccheck $B/conformance --backend cuda --grid full > $OUT/synccheck-full.log 2>&1; echo "synccheck rc $?"; grep 'ERROR SUMMARY' $OUT/synccheck-full.log; grep -c '  OK ' $OUT/synccheck-full.log; tail -2 $OUT/synccheck-full.log
date -u
timeout 330 compute-sanitizer --tool racecheck $B/conformance --backend cuda --grid full > $OUT/racecheck-full.log 2>&1; echo "racecheck rc $?"; grep -c 'RACECHECK SUMMARY\|hazard' $OUT/racecheck-full.log; grep -c '  OK ' $OUT/racecheck-full.log; tail -2 $OUT/racecheck-full.log
date -u
