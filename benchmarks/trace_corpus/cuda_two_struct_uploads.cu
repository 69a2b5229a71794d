// A CUDA C++ renderer's shading pass, replaying a 512-frame fly-through of a night-time plaza:
// the raster pass has left a resolved visibility buffer of 2560 x 1440 on the GPU (per pixel its
// instance, its object-space position and normal and its albedo, 32 bytes; 118 MB), and each
// frame the shading kernel moves each pixel to world space with its instance's transform, lights
// it with the 64 lights (points and spots: a falloff radius, a cone, Lambert and Blinn-Phong) and
// blends it into the HDR history (float4, temporal accumulation). The host's engine keeps two
// kinds of per-frame state in a pinned arena (cudaMallocHost): its 128 animated instances (a
// spinning, bobbing object each; the GPU's 128-byte struct: object-to-world 3 x 4, normal matrix,
// tint, shininess) and its 64 lights (moving on their paths, spots sweeping, lamps flickering;
// the GPU's 64-byte struct). The scene graph walks the instances, animates each and uploads its
// struct with its own cudaMemcpyAsync; the light manager then walks the lights, animates each and
// uploads its struct with its own cudaMemcpyAsync, from another line; then the shading kernel,
// and the stream synchronized once a frame, at its end: the arena is rewritten by the next frame.
// Cause: 192 small copies a frame (128 of 128 bytes, 64 of 64 bytes), each a cudaMemcpyAsync's
// fixed cost on the host while the GPU, done with the frame before, waits. --fixed: both kinds
// written into one pinned frame buffer (cudaMallocHost, made once) laid out as the device's, and
// uploaded with one cudaMemcpyAsync: the same 20 KiB. --resident: the fly-through's 512 frames
// of instances and lights animated and uploaded before the loop (10 MiB), each frame shaded with
// its own, and no wait a frame (no arena to rewrite). Prints one JSON line as corpus.py's
// Loop.report does, with the final history's sum ("checksum": the same in every form).
//   cuda_two_struct_uploads [--steps N] [--fixed] [--resident]
//   built with
//   nvcc -O2 -g -lineinfo -arch=sm_90 -o cuda_two_struct_uploads cuda_two_struct_uploads.cu

// cause: small_copies
// fix: the 128 instances' and 64 lights' structs packed in one pinned buffer, one cudaMemcpyAsync
// step: STEP
// resident: yes
// gpus: 1
// needs: nvcc

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <vector>

#include "corpus.hpp"

constexpr int kWidth = 2560, kHeight = 1440, kPixels = kWidth * kHeight;
constexpr int kInstances = 128, kLights = 64, kPeriod = 512, kWarmup = 3;
constexpr float kBlend = 0.1f;  // the history's weight of the new frame
constexpr float kAmbient = 0.03f;
constexpr std::uint32_t kNoInstance = 0xFFFFFFFFu;  // a pixel of sky
constexpr double kPi = 3.14159265358979323846;
constexpr auto kH2D = cudaMemcpyHostToDevice, kD2H = cudaMemcpyDeviceToHost;

struct alignas(16) Instance {  // what the kernel reads of an instance: 128 bytes
  float model[3][4];           // object to world: rotation times scale, the translation last
  float normal[3][4];          // object normals to world (rotation over scale), padded rows
  float tint[4];               // the albedo's tint, then the specular strength
  float shininess;             // the Blinn-Phong exponent
  float emissive;              // its own glow, times the albedo
  std::uint32_t id, flags;     // the engine's own
};
static_assert(sizeof(Instance) == 128, "an instance's struct is 128 bytes");

struct alignas(16) Light {        // what the kernel reads of a light: 64 bytes
  float position[3], radius;      // where it is (m) and where its falloff reaches 0
  float color[3], intensity;      // its colour and this frame's intensity
  float direction[3], cos_outer;  // a spot's axis and outer cone; cos_outer < -1: a point light
  float cos_inner;                // a spot's inner cone, where it is at full intensity
  std::uint32_t id;               // the engine's own
  float pad[2];
};
static_assert(sizeof(Light) == 64, "a light's struct is 64 bytes");

struct Frame {  // a frame's parameters as the device holds them: 20 KiB
  Instance instances[kInstances];
  Light lights[kLights];
};

struct alignas(16) Texel {  // the visibility buffer's pixel: 32 bytes
  float px, py, pz;         // its object-space position
  std::uint32_t instance;   // its instance, kNoInstance for sky
  float nx, ny, nz;         // its object-space normal
  std::uint32_t albedo;     // RGBA8
};

struct Object {  // an instance in the engine's scene: the GPU's struct, then the host's own
  Instance gpu;
  double cx, cy, cz, orbit, turns, spin, bob, bobs, phase;  // its path, its turns a period
  double axis[3], scale[3];                                 // its spin's axis, its scale
};

struct Lamp {  // a light in the engine's scene: the GPU's struct, then the host's own
  Light gpu;
  double cx, cz, height, radius, turns, sweep, tilt, flicker, phase, strength;
};

__device__ float3 operator+(float3 a, float3 b) {
  return make_float3(a.x + b.x, a.y + b.y, a.z + b.z);
}
__device__ float3 operator-(float3 a, float3 b) {
  return make_float3(a.x - b.x, a.y - b.y, a.z - b.z);
}
__device__ float3 operator*(float s, float3 a) { return make_float3(s * a.x, s * a.y, s * a.z); }
__device__ float dot(float3 a, float3 b) { return a.x * b.x + a.y * b.y + a.z * b.z; }
__device__ float3 normalized(float3 a) { return rsqrtf(fmaxf(dot(a, a), 1e-12f)) * a; }
__device__ float3 rows(const float (*m)[4], float3 v, bool translate) {
  return make_float3(m[0][0] * v.x + m[0][1] * v.y + m[0][2] * v.z + (translate ? m[0][3] : 0.0f),
                     m[1][0] * v.x + m[1][1] * v.y + m[1][2] * v.z + (translate ? m[1][3] : 0.0f),
                     m[2][0] * v.x + m[2][1] * v.y + m[2][2] * v.z + (translate ? m[2][3] : 0.0f));
}

// A frame shaded: each pixel to world space with its instance's transform, lit by every light
// within reach, and blended into the HDR history.
__global__ void shade(const Texel* __restrict__ visibility, const Frame* __restrict__ frame,
                      float4* __restrict__ history, float3 eye) {
  const int col = blockIdx.x * blockDim.x + threadIdx.x;
  const int row = blockIdx.y * blockDim.y + threadIdx.y;
  if (col >= kWidth || row >= kHeight) return;
  const int i = row * kWidth + col;
  const Texel t = visibility[i];
  float3 color = make_float3(0.02f, 0.03f, 0.06f);  // the night sky
  if (t.instance != kNoInstance) {
    const Instance& m = frame->instances[t.instance];
    const float3 p = rows(m.model, make_float3(t.px, t.py, t.pz), true);
    const float3 n = normalized(rows(m.normal, make_float3(t.nx, t.ny, t.nz), false));
    const float3 v = normalized(eye - p);
    const float3 albedo = make_float3(m.tint[0] * (t.albedo & 0xFF) / 255.0f,
                                      m.tint[1] * ((t.albedo >> 8) & 0xFF) / 255.0f,
                                      m.tint[2] * ((t.albedo >> 16) & 0xFF) / 255.0f);
    color = (kAmbient + m.emissive) * albedo;
    for (int k = 0; k < kLights; ++k) {
      const Light& l = frame->lights[k];
      const float3 to = make_float3(l.position[0], l.position[1], l.position[2]) - p;
      const float d2 = dot(to, to), r2 = l.radius * l.radius;
      if (d2 >= r2 || d2 < 1e-8f) continue;
      const float3 dir = rsqrtf(d2) * to;
      const float lambert = dot(n, dir);
      if (lambert <= 0.0f) continue;
      float cone = 1.0f;
      if (l.cos_outer >= -1.0f) {  // a spot: full inside its inner cone, none past its outer
        const float c = -dot(dir, make_float3(l.direction[0], l.direction[1], l.direction[2]));
        cone = fminf(fmaxf((c - l.cos_outer) / (l.cos_inner - l.cos_outer), 0.0f), 1.0f);
        cone *= cone;
      }
      const float fall = (1.0f - d2 / r2) * (1.0f - d2 / r2) / (1.0f + d2);
      const float spec = m.tint[3] * __powf(fmaxf(dot(n, normalized(dir + v)), 0.0f), m.shininess);
      const float w = l.intensity * fall * cone;
      color = color + w * make_float3(l.color[0] * (albedo.x * lambert + spec),
                                      l.color[1] * (albedo.y * lambert + spec),
                                      l.color[2] * (albedo.z * lambert + spec));
    }
  }
  float4 h = history[i];
  h.x += kBlend * (color.x - h.x), h.y += kBlend * (color.y - h.y), h.z += kBlend * (color.z - h.z);
  history[i] = h;
}

using corpus::next, corpus::noise, corpus::uniform;  // the random start (corpus.hpp)

// The scene graph's update of an instance for frame i: spun about its axis (Rodrigues), scaled,
// carried along its orbit and bobbing.
Instance& animate(Object& o, int i) {
  const double t = static_cast<double>(i % kPeriod) / kPeriod;
  const double angle = 2 * kPi * (o.spin * t + o.phase), c = std::cos(angle), s = std::sin(angle);
  const double* a = o.axis;
  const double r[3][3] = {{c + a[0] * a[0] * (1 - c), a[0] * a[1] * (1 - c) - a[2] * s,
                           a[0] * a[2] * (1 - c) + a[1] * s},
                          {a[1] * a[0] * (1 - c) + a[2] * s, c + a[1] * a[1] * (1 - c),
                           a[1] * a[2] * (1 - c) - a[0] * s},
                          {a[2] * a[0] * (1 - c) - a[1] * s, a[2] * a[1] * (1 - c) + a[0] * s,
                           c + a[2] * a[2] * (1 - c)}};
  const double around = 2 * kPi * (o.turns * t + o.phase);
  const double at[3] = {o.cx + o.orbit * std::cos(around),
                        o.cy + o.bob * std::sin(2 * kPi * (o.bobs * t + o.phase)),
                        o.cz + o.orbit * std::sin(around)};
  Instance& g = o.gpu;
  for (int row = 0; row < 3; ++row) {
    for (int col = 0; col < 3; ++col) {
      g.model[row][col] = float(r[row][col] * o.scale[col]);
      g.normal[row][col] = float(r[row][col] / o.scale[col]);
    }
    g.model[row][3] = float(at[row]), g.normal[row][3] = 0.0f;
  }
  return g;
}

// The light manager's update of a lamp for frame i: along its path, its spot swept, flickering.
Light& animate(Lamp& l, int i, int k) {
  const int frame = i % kPeriod;
  const double t = static_cast<double>(frame) / kPeriod;
  const double around = 2 * kPi * (l.turns * t + l.phase),
               sweep = 2 * kPi * (l.sweep * t + l.phase);
  Light& g = l.gpu;
  g.position[0] = float(l.cx + l.radius * std::cos(around));
  g.position[1] = float(l.height);
  g.position[2] = float(l.cz + l.radius * std::sin(around));
  const double down = std::cos(l.tilt), out = std::sin(l.tilt);  // its axis, tilted from down
  g.direction[0] = float(out * std::cos(sweep)), g.direction[1] = float(-down);
  g.direction[2] = float(out * std::sin(sweep));
  const std::uint64_t key = static_cast<std::uint64_t>(frame) * kLights + k;
  g.intensity = float(l.strength * (1 - l.flicker * noise(key)));
  return g;
}

int main(int argc, char** argv) {
  const corpus::Options o = corpus::options(argc, argv, 4000);
  const int steps = o.steps;
  const bool fixed = o.fixed, resident = o.resident;

  // the engine's scene, in a pinned arena: each object's and lamp's GPU struct and its own state
  Object* objects = nullptr;
  Lamp* lamps = nullptr;
  CHECK(cudaMallocHost(&objects, kInstances * sizeof(Object)));
  CHECK(cudaMallocHost(&lamps, kLights * sizeof(Lamp)));
  for (int k = 0; k < kInstances; ++k) {
    Object& b = objects[k];
    b.cx = uniform(-20, 20), b.cy = uniform(0.5, 6), b.cz = uniform(-20, 20);
    b.orbit = uniform(0, 3), b.turns = int(uniform(0, 3)), b.spin = 1 + int(uniform(0, 4));
    b.bob = uniform(0, 0.5), b.bobs = 1 + int(uniform(0, 8)), b.phase = uniform();
    const double z = uniform(-1, 1), around = uniform(0, 2 * kPi), ring = std::sqrt(1 - z * z);
    b.axis[0] = ring * std::cos(around), b.axis[1] = z, b.axis[2] = ring * std::sin(around);
    for (double& s : b.scale) s = uniform(0.5, 3);
    Instance& g = b.gpu;
    for (int c = 0; c < 3; ++c) g.tint[c] = float(uniform(0.6, 1));
    g.tint[3] = float(uniform(0.05, 0.6)), g.shininess = float(uniform(8, 128));
    g.emissive = float(uniform() < 0.1 ? uniform(0.2, 1) : 0), g.id = k, g.flags = 1;
  }
  for (int k = 0; k < kLights; ++k) {
    Lamp& l = lamps[k];
    l.cx = uniform(-18, 18), l.cz = uniform(-18, 18), l.height = uniform(3, 10);
    l.radius = uniform(0, 6), l.turns = int(uniform(0, 3)), l.sweep = 1 + int(uniform(0, 4));
    l.tilt = uniform(0, 0.8), l.flicker = uniform() < 0.25 ? uniform(0.1, 0.5) : 0;
    l.phase = uniform(), l.strength = uniform(20, 80);
    Light& g = l.gpu;
    const double warm = uniform();
    g.color[0] = float(0.8 + 0.2 * warm), g.color[1] = float(0.75 + 0.1 * uniform());
    g.color[2] = float(1.0 - 0.4 * warm), g.radius = float(uniform(8, 20));
    const bool spot = uniform() < 0.5;
    const double outer = uniform(0.3, 0.7);
    g.cos_outer = spot ? float(std::cos(outer)) : -2.0f;
    g.cos_inner = spot ? float(std::cos(outer * uniform(0.5, 0.9))) : 1.0f;
    g.id = k, g.pad[0] = g.pad[1] = 0;
  }

  // the raster pass's visibility buffer (one pixel in ten sky) and the history's start
  std::vector<Texel> texels(kPixels);
  for (Texel& t : texels) {
    t.px = float(uniform(-1, 1)), t.py = float(uniform(-1, 1)), t.pz = float(uniform(-1, 1));
    t.instance = uniform() < 0.1 ? kNoInstance : std::uint32_t(next() % kInstances);
    const double z = uniform(-1, 1), around = uniform(0, 2 * kPi), ring = std::sqrt(1 - z * z);
    t.nx = float(ring * std::cos(around)), t.ny = float(z), t.nz = float(ring * std::sin(around));
    t.albedo = std::uint32_t(next() >> 40);
  }
  std::vector<float4> history(kPixels);
  for (float4& h : history) {
    h.x = float(uniform(0, 0.2)), h.y = float(uniform(0, 0.2));
    h.z = float(uniform(0, 0.2)), h.w = 1;
  }
  Texel* d_visibility = nullptr;
  float4* d_history = nullptr;
  CHECK(cudaMalloc(&d_visibility, kPixels * sizeof(Texel)));
  CHECK(cudaMalloc(&d_history, kPixels * sizeof(float4)));
  CHECK(cudaMemcpy(d_visibility, texels.data(), kPixels * sizeof(Texel), kH2D));
  CHECK(cudaMemcpy(d_history, history.data(), kPixels * sizeof(float4), kH2D));
  cudaStream_t stream;
  CHECK(cudaStreamCreate(&stream));

  Frame *d_frame = nullptr, *d_clip = nullptr, *packed = nullptr;
  CHECK(cudaMalloc(&d_frame, sizeof(Frame)));
  char* const d_bytes = reinterpret_cast<char*>(d_frame);  // where each struct goes on the GPU
  Instance* const d_instances = reinterpret_cast<Instance*>(d_bytes + offsetof(Frame, instances));
  Light* const d_lights = reinterpret_cast<Light*>(d_bytes + offsetof(Frame, lights));
  if (fixed) CHECK(cudaMallocHost(&packed, sizeof(Frame)));  // the fix's staging, pinned
  if (resident) {  // the fly-through's every frame animated, packed and uploaded once
    std::vector<Frame> clip(kPeriod);
    for (int t = 0; t < kPeriod; ++t) {
      for (int k = 0; k < kInstances; ++k) clip[t].instances[k] = animate(objects[k], t);
      for (int k = 0; k < kLights; ++k) clip[t].lights[k] = animate(lamps[k], t, k);
    }
    CHECK(cudaMalloc(&d_clip, kPeriod * sizeof(Frame)));
    CHECK(cudaMemcpy(d_clip, clip.data(), kPeriod * sizeof(Frame), kH2D));
  }
  const dim3 threads(32, 8), blocks(kWidth / 32, kHeight / 8);
  auto step = [&](int i) {  // the instances and lights animated and uploaded, the frame shaded
    if (!resident) {
      for (int k = 0; k < kInstances; ++k) {  // the scene graph's walk
        const Instance& g = animate(objects[k], i);
        if (fixed) {
          packed->instances[k] = g;
          continue;
        }
        CHECK(cudaMemcpyAsync(d_instances + k, &g, sizeof g, kH2D, stream));  // STEP
      }
      for (int k = 0; k < kLights; ++k) {  // the light manager's
        const Light& g = animate(lamps[k], i, k);
        if (fixed) {
          packed->lights[k] = g;
          continue;
        }
        CHECK(cudaMemcpyAsync(d_lights + k, &g, sizeof g, kH2D, stream));  // STEP
      }
      if (fixed) CHECK(cudaMemcpyAsync(d_frame, packed, sizeof(Frame), kH2D, stream));  // STEP
    }
    // the camera along the fly-through: circling the plaza, looking in
    const double view = 2 * kPi * (i % kPeriod) / kPeriod;
    const float3 eye = make_float3(float(30 * std::cos(view)), 12.0f, float(30 * std::sin(view)));
    const Frame* now = resident ? d_clip + i % kPeriod : d_frame;
    shade<<<blocks, threads, 0, stream>>>(d_visibility, now, d_history, eye);
    CHECK(cudaGetLastError());
    if (!resident) CHECK(cudaStreamSynchronize(stream));  // before the host rewrites the arena
  };
  corpus::Loop loop;
  loop.run(step, kWarmup, steps);
  CHECK(cudaMemcpy(history.data(), d_history, kPixels * sizeof(float4), kD2H));
  double checksum = 0;
  for (const float4& h : history) checksum += double(h.x) + h.y + h.z;
  loop.report("cuda_two_struct_uploads", o, corpus::checksum(checksum));
  return 0;  // the host's and the device's memory freed with the process
}
