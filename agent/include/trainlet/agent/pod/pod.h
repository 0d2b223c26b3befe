// trainlet/agent/pod/pod.h — the life of one pod: rendezvous, run workers, exit.
//
//   identify -> check the trainer -> resolve leader -> join gang -> run workers
//   -> stop -> exit
//
// The trainer is checked (launch_check.h) before any network traffic: what
// cannot run is a config error (78) then, not after the gang formed.
//
// RunPod drives all of it on one Asio event loop in the calling thread and
// returns the process exit code (see exitcodes/exit_code.h). Blocking: it
// returns when the pod is done. Call once, from main, with the handled signals
// already blocked (BlockHandledSignals); move the options in (the run keeps
// them for days: no second copy).
#pragma once

#include "trainlet/agent/pod/pod_options.h"

namespace trainlet::agent {

int RunPod(PodOptions options);

}  // namespace trainlet::agent
