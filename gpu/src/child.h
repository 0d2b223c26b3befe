// Runs a function in a forked child and returns what it wrote, so driver
// libraries (CUDA, NVML) are never initialised in the calling process (PID 1).
#pragma once

#include <chrono>
#include <functional>
#include <optional>
#include <string>

namespace trainlet::gpu::internal {

// fork(); the child runs `fn`, writes its result to a pipe and _exits. Returns
// the text, or nullopt when the child gave no complete answer within `timeout`
// (then it is SIGKILLed) or died, or when a SIGTERM/SIGINT is pending
// (exitcodes::PendingStopSignal, checked every 100 ms: the child is SIGKILLed
// and the agent stops); `why` then says which. Call before threads
// that hold locks the child could need exist (fork).
std::optional<std::string> RunInChild(const std::function<std::string()>& fn,
                                      std::chrono::milliseconds timeout, std::string* why);

}  // namespace trainlet::gpu::internal
