// A CUDA C++ traffic-state estimator on a road network: 262144 road segments, each with a row of
// 64 floats (its speeds by lane and time bin; 64 MiB, two buffers in turn), joined in a graph of
// 16-32 neighbours a segment (CSR, row-normalized weights, on the GPU). Each iteration 128 loop
// detectors report, one from each of 128 districts, and the host decodes their reports from the
// detector log (a recorded day of 512 iterations, replayed) into a std::vector of reports, each
// a segment's index and its new row in its own std::vector<float> (ordinary pageable memory);
// it uploads each reported row with its own cudaMemcpy to the segment's place in the current
// field, then launches a kernel that diffuses the field over the graph (a few hundred us).
// Cause: 128 small copies (256 bytes each) an iteration, each a synchronous cudaMemcpy from
// pageable memory (the call, a wait for the stream, the driver's staging and the copy) while
// the GPU, done with the kernel before, waits. --fixed: the reports gathered on the host into
// one pinned staging buffer (cudaMallocHost, made once: the 128 segments' indices, then their
// rows), uploaded with one cudaMemcpy (33 KiB) and scattered into the field by a small kernel;
// the same values. --resident: the log's 512 iterations decoded and uploaded before the loop,
// each iteration's reports scattered from there. Prints one JSON line as corpus.py's
// Loop.report does, with the final field's sum ("checksum": the same in every form).
//   cuda_pageable_rows [--steps N] [--fixed] [--resident]
//   built with nvcc -O2 -g -lineinfo -arch=sm_90 -o cuda_pageable_rows cuda_pageable_rows.cu

// cause: small_copies
// fix: the 128 reported rows gathered into one pinned buffer, one cudaMemcpy, scattered on the GPU
// step: STEP
// resident: yes
// gpus: 1
// needs: nvcc

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <vector>

#include "corpus.hpp"

constexpr int kSegments = 1 << 18, kWidth = 64;            // the field: 64 MiB of float
constexpr int kRows = 128, kDistrict = kSegments / kRows;  // reports an iteration, one a district
constexpr int kLeast = 16, kMost = 32, kLocal = 256;  // a segment's neighbours, how near most are
constexpr int kPeriod = 512, kWarmup = 3, kNodesPerBlock = 4;
constexpr float kAlpha = 0.5f;  // the share of a segment's new state its neighbours give
constexpr double kPi = 3.14159265358979323846;
constexpr auto kH2D = cudaMemcpyHostToDevice, kD2H = cudaMemcpyDeviceToHost;

struct Report {  // a detector's report, as the host decodes it
  int segment;
  std::vector<float> row;  // kWidth speeds
};

struct Batch {  // an iteration's reports, packed: what the fixed form uploads at once
  int segments[kRows];
  float rows[kRows][kWidth];
};

// One step of diffusion: each segment's row mixed with its neighbours' weighted mean.
__global__ void diffuse(const float* __restrict__ in, float* __restrict__ out,
                        const int* __restrict__ offsets, const int* __restrict__ neighbours,
                        const float* __restrict__ weights) {
  const int j = threadIdx.x, v = blockIdx.x * kNodesPerBlock + threadIdx.y;
  if (v >= kSegments) return;
  float mean = 0.0f;
  for (int e = offsets[v]; e < offsets[v + 1]; ++e)
    mean += weights[e] * in[neighbours[e] * kWidth + j];
  out[v * kWidth + j] = (1.0f - kAlpha) * in[v * kWidth + j] + kAlpha * mean;
}

// The fixed and resident forms': an iteration's reported rows written into the field.
__global__ void scatter(const Batch* __restrict__ batch, float* __restrict__ field) {
  field[batch->segments[blockIdx.x] * kWidth + threadIdx.x] = batch->rows[blockIdx.x][threadIdx.x];
}

using corpus::next, corpus::noise, corpus::uniform;  // the random start (corpus.hpp)

// The host's decoding of iteration i's reports from the log: which segment of each district
// reported, and its speeds (its district's usual ones through the day's cycle, with noise).
void decode(std::vector<Report>& reports, const std::vector<float>& usual,
            const std::vector<double>& phase, int i) {
  const int t = i % kPeriod;
  for (int k = 0; k < kRows; ++k) {
    Report& r = reports[k];
    const std::uint64_t key = static_cast<std::uint64_t>(t) * kRows + k;
    r.segment = k * kDistrict + static_cast<int>(noise(key) * kDistrict);
    const double rush = 1 - 0.4 * std::sin(2 * kPi * (double(t) / kPeriod + phase[k]));
    for (int j = 0; j < kWidth; ++j)
      r.row[j] = float(usual[k * kWidth + j] * rush * (0.95 + 0.1 * noise(key * kWidth + j + 1)));
  }
}

void pack(Batch& batch, const std::vector<Report>& reports) {
  for (int k = 0; k < kRows; ++k) {
    batch.segments[k] = reports[k].segment;
    std::memcpy(batch.rows[k], reports[k].row.data(), kWidth * sizeof(float));
  }
}

int main(int argc, char** argv) {
  const corpus::Options o = corpus::options(argc, argv, 4000);
  const int steps = o.steps;
  const bool fixed = o.fixed, resident = o.resident;
  // the road network: mostly segments near in the numbering (along their roads), a few far
  std::vector<int> offsets(kSegments + 1), neighbours;
  std::vector<float> weights;
  for (int v = 0; v < kSegments; ++v) {
    const int degree = kLeast + int(uniform(0, kMost - kLeast + 1));
    double sum = 0;
    const std::size_t first = weights.size();
    for (int d = 0; d < degree; ++d) {
      int w = d < degree - 4 ? v + int(uniform(-kLocal, kLocal)) : int(uniform(0, kSegments));
      w = (w % kSegments + kSegments) % kSegments;
      neighbours.push_back(w);
      weights.push_back(float(uniform(0.5, 1.5)));
      sum += weights.back();
    }
    for (std::size_t e = first; e < weights.size(); ++e) weights[e] = float(weights[e] / sum);
    offsets[v + 1] = int(neighbours.size());
  }
  std::vector<float> usual(kRows * kWidth), host(std::size_t(kSegments) * kWidth);
  std::vector<double> phase(kRows);
  for (float& s : usual) s = float(uniform(20, 110));  // km/h
  for (double& p : phase) p = uniform();
  for (float& s : host) s = float(uniform(20, 110));
  std::vector<Report> reports(kRows);
  for (Report& r : reports) r.row.resize(kWidth);

  int *d_offsets = nullptr, *d_neighbours = nullptr;
  float *d_weights = nullptr, *field[2] = {nullptr, nullptr};
  CHECK(cudaMalloc(&d_offsets, offsets.size() * sizeof(int)));
  CHECK(cudaMalloc(&d_neighbours, neighbours.size() * sizeof(int)));
  CHECK(cudaMalloc(&d_weights, weights.size() * sizeof(float)));
  CHECK(cudaMemcpy(d_offsets, offsets.data(), offsets.size() * sizeof(int), kH2D));
  CHECK(cudaMemcpy(d_neighbours, neighbours.data(), neighbours.size() * sizeof(int), kH2D));
  CHECK(cudaMemcpy(d_weights, weights.data(), weights.size() * sizeof(float), kH2D));
  for (float*& f : field) CHECK(cudaMalloc(&f, host.size() * sizeof(float)));
  CHECK(cudaMemcpy(field[0], host.data(), host.size() * sizeof(float), kH2D));

  Batch* staged = nullptr;  // the fixed form's staging buffer, pinned
  Batch *d_batch = nullptr, *d_log = nullptr;
  if (fixed) {
    CHECK(cudaMallocHost(&staged, sizeof(Batch)));
    CHECK(cudaMalloc(&d_batch, sizeof(Batch)));
  }
  if (resident) {  // the log's every iteration decoded, packed and uploaded once
    std::vector<Batch> log(kPeriod);
    for (int t = 0; t < kPeriod; ++t) decode(reports, usual, phase, t), pack(log[t], reports);
    CHECK(cudaMalloc(&d_log, kPeriod * sizeof(Batch)));
    CHECK(cudaMemcpy(d_log, log.data(), kPeriod * sizeof(Batch), kH2D));
  }
  const dim3 threads(kWidth, kNodesPerBlock), blocks(kSegments / kNodesPerBlock);
  auto step = [&](int i) {  // the reports written into the field, the field diffused
    float* now = field[i % 2];
    if (resident) {
      scatter<<<kRows, kWidth>>>(d_log + i % kPeriod, now);
    } else {
      decode(reports, usual, phase, i);
      if (fixed) {
        pack(*staged, reports);
        CHECK(cudaMemcpy(d_batch, staged, sizeof(Batch), kH2D));  // STEP
        scatter<<<kRows, kWidth>>>(d_batch, now);
      } else {
        for (const Report& r : reports) {
          float* place = now + std::size_t(r.segment) * kWidth;
          CHECK(cudaMemcpy(place, r.row.data(), kWidth * sizeof(float), kH2D));  // STEP
        }
      }
    }
    diffuse<<<blocks, threads>>>(now, field[(i + 1) % 2], d_offsets, d_neighbours, d_weights);
    CHECK(cudaGetLastError());
  };
  corpus::Loop loop;
  loop.run(step, kWarmup, steps);
  CHECK(cudaMemcpy(host.data(), field[(kWarmup + steps) % 2], host.size() * sizeof(float), kD2H));
  double checksum = 0;
  for (float v : host) checksum += v;
  loop.report("cuda_pageable_rows", o, corpus::checksum(checksum));
  return 0;  // the host's and the device's memory freed with the process
}
