// A data-parallel training loop with NCCL, launched by trainlet:
//
//   trainlet --nnodes 2 --nproc-per-node gpu -- cpp-trainer --steps 200
//
// Every rank fits the same linear model y = w.x + b to its own shard of
// synthetic data; gradients are summed with ncclAllReduce on the GPU, so the
// ranks' weights stay identical (checked at the end through the store). Exit 0
// when the loss fell and all ranks agree; on an NCCL/CUDA failure the error is
// reported to trainlet (Session::ReportError) and the exit is 1.
#include <cuda_runtime.h>
#include <nccl.h>

#include <trainlet/session.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <thread>
#include <vector>

namespace {

constexpr int kFeatures = 64;
constexpr int kSamples = 4096;  // per rank

int Fail(trainlet::Session& s, trainlet::ErrorClass c, const std::string& what) {
  std::fprintf(stderr, "[rank %d] %s\n", s.rank(), what.c_str());
  s.ReportError(c, what);
  return 1;
}

// Waits for a non-blocking communicator's work (trainlet::Session makes one),
// then for the stream; aborts the communicator at the deadline.
ncclResult_t Finish(ncclComm_t comm, cudaStream_t stream, std::chrono::seconds timeout) {
  auto deadline = std::chrono::steady_clock::now() + timeout;
  ncclResult_t state = ncclInProgress;
  while (state == ncclInProgress) {
    if (ncclCommGetAsyncError(comm, &state) != ncclSuccess) return ncclInternalError;
    if (std::chrono::steady_clock::now() > deadline) {
      ncclCommAbort(comm);
      return ncclInProgress;
    }
  }
  if (state != ncclSuccess) return state;
  while (cudaStreamQuery(stream) == cudaErrorNotReady) {
    if (std::chrono::steady_clock::now() > deadline) {
      ncclCommAbort(comm);
      return ncclInProgress;
    }
    std::this_thread::yield();
  }
  return cudaGetLastError() == cudaSuccess ? ncclSuccess : ncclUnhandledCudaError;
}

}  // namespace

int main(int argc, char** argv) {
  int steps = 100;
  for (int i = 1; i + 1 < argc; ++i) {
    if (std::strcmp(argv[i], "--steps") == 0) steps = std::atoi(argv[i + 1]);
  }
  auto created = trainlet::Session::Create();
  if (!created) {
    std::fprintf(stderr, "trainlet session: %s\n", created.error.c_str());
    return 2;
  }
  trainlet::Session& s = **created.value;
  if (cudaError_t e = cudaSetDevice(s.device()); e != cudaSuccess) {
    return Fail(s, trainlet::ErrorClass::kHardware,
                "cudaSetDevice(" + std::to_string(s.device()) + "): " + cudaGetErrorString(e));
  }
  auto comm = s.NcclComm(std::chrono::seconds(120));
  if (!comm) return Fail(s, trainlet::ErrorClass::kInfra, "NCCL: " + comm.error);
  ncclComm_t nccl = *comm.value;

  // The data: the same true model everywhere, each rank its own samples.
  std::mt19937 rng(1234u + static_cast<unsigned>(s.rank()));
  std::normal_distribution<float> normal(0.f, 1.f);
  std::vector<float> truth(kFeatures + 1);
  std::mt19937 shared(42);
  for (auto& t : truth) t = std::normal_distribution<float>(0.f, 1.f)(shared);
  std::vector<float> x(static_cast<size_t>(kSamples) * kFeatures), y(kSamples);
  for (int n = 0; n < kSamples; ++n) {
    float dot = truth[kFeatures];
    for (int f = 0; f < kFeatures; ++f) {
      float v = normal(rng);
      x[static_cast<size_t>(n) * kFeatures + f] = v;
      dot += truth[f] * v;
    }
    y[n] = dot + 0.01f * normal(rng);
  }

  std::vector<float> w(kFeatures + 1, 0.f), grad(kFeatures + 2);  // grad + loss
  float* dgrad = nullptr;
  cudaStream_t stream;
  if (cudaMalloc(&dgrad, grad.size() * sizeof(float)) != cudaSuccess ||
      cudaStreamCreate(&stream) != cudaSuccess) {
    return Fail(s, trainlet::ErrorClass::kHardware, "CUDA allocation failed");
  }
  const float lr = 0.1f;
  float first_loss = -1, loss = 0;
  for (int step = 0; step < steps; ++step) {
    std::fill(grad.begin(), grad.end(), 0.f);
    for (int n = 0; n < kSamples; ++n) {
      const float* xn = &x[static_cast<size_t>(n) * kFeatures];
      float pred = w[kFeatures];
      for (int f = 0; f < kFeatures; ++f) pred += w[f] * xn[f];
      float err = pred - y[n];
      for (int f = 0; f < kFeatures; ++f) grad[f] += err * xn[f];
      grad[kFeatures] += err;
      grad[kFeatures + 1] += err * err;
    }
    cudaMemcpyAsync(dgrad, grad.data(), grad.size() * sizeof(float), cudaMemcpyHostToDevice, stream);
    ncclResult_t r = ncclAllReduce(dgrad, dgrad, grad.size(), ncclFloat, ncclSum, nccl, stream);
    if (r == ncclSuccess || r == ncclInProgress) r = Finish(nccl, stream, std::chrono::seconds(60));
    if (r != ncclSuccess) {
      return Fail(s, trainlet::ErrorClass::kInfra,
                  std::string("ncclAllReduce at step ") + std::to_string(step) + ": " +
                      (r == ncclInProgress ? "timed out (aborted)" : ncclGetErrorString(r)));
    }
    cudaMemcpy(grad.data(), dgrad, grad.size() * sizeof(float), cudaMemcpyDeviceToHost);
    const float total = static_cast<float>(kSamples) * static_cast<float>(s.world_size());
    for (int f = 0; f <= kFeatures; ++f) w[f] -= lr * grad[f] / total;
    loss = grad[kFeatures + 1] / total;
    if (first_loss < 0) first_loss = loss;
    if (s.rank() == 0 && step % 20 == 0) std::printf("step %d loss %.6f\n", step, loss);
    s.Heartbeat();
  }

  // Every rank's weights must be bit-identical: compare through the store.
  std::string mine(reinterpret_cast<const char*>(w.data()), w.size() * sizeof(float));
  auto& store = s.store();
  bool same = store.Set("weights/" + std::to_string(s.rank()), mine, std::chrono::seconds(60)) &&
              store.Barrier("weights", std::chrono::seconds(60));
  for (int r = 0; same && r < s.world_size(); ++r) {
    auto theirs = store.Get("weights/" + std::to_string(r), std::chrono::seconds(60));
    same = theirs && *theirs == mine;
  }
  store.Barrier("done", std::chrono::seconds(60));
  ncclCommDestroy(nccl);
  cudaFree(dgrad);
  std::printf("rank %d/%d final loss %.6f (first %.6f) weights identical: %s\n", s.rank(),
              s.world_size(), loss, first_loss, same ? "yes" : "no");
  return same && loss < first_loss * 0.1f ? 0 : 1;
}
