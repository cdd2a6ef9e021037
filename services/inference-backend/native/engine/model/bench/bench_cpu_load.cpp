// How long the CPU backend takes to load a model and how much memory the load holds at its
// peak: each run constructs a CpuBackend in a child process of its own (so the peak is that
// load's alone), from a file in the page cache, and reports
//   seconds     the constructor, from opening the file to the repacked weights;
//   peak MiB    the child's peak resident memory (VmHWM) less what it held before the load;
//   held MiB    what it holds once the backend is loaded (VmRSS, the same baseline).
// Each counts the file's pages the mapping has resident (a load drops each tensor's pages
// once it has copied them out), so a load that copies the whole file before packing it peaks
// near twice the file. Prints each run, then the medians; --out writes the runs as JSON.
// --cold drops the checkpoint's files from the page cache before each run
// (posix_fadvise(POSIX_FADV_DONTNEED), no privileges needed) and says how much of them was
// still cached, so the load reads them from the disk.
//
//   bench_cpu_load MODEL [MODEL...] [--runs N] [--threads N] [--cold] [--out FILE.json]
//   (several models: each run loads every one, the order alternating between runs)
//   (a GGUF file or a Hugging Face folder; scripts/device/llama3_gguf.py writes a large GGUF)
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "strata/cpu_backend.h"
#include "strata/model_error.h"

using namespace strata;

namespace {

struct Run {
  double seconds = 0;
  double peak_mib = 0, held_mib = 0;
  int threads = 0;  // the backend's, the caller's included
};

// A /proc/self/status field in KiB ("VmHWM", "VmRSS").
long status_kib(const char* field) {
  std::FILE* f = std::fopen("/proc/self/status", "r");
  if (f == nullptr) return -1;
  char line[256];
  long kib = -1;
  const size_t n = std::char_traits<char>::length(field);
  while (std::fgets(line, sizeof line, f) != nullptr) {
    if (std::strncmp(line, field, n) == 0 && line[n] == ':') {
      kib = std::atol(line + n + 1);
      break;
    }
  }
  std::fclose(f);
  return kib;
}

// Runs one load in a child; its figures come back through a pipe.
bool run_child(const char* model, int threads, Run* out) {
  int fds[2];
  if (::pipe(fds) != 0) return false;
  const pid_t pid = ::fork();
  if (pid < 0) return false;
  if (pid == 0) {
    ::close(fds[0]);
    Run r;
    const long before = status_kib("VmRSS");
    int code = 0;
    try {
      CpuBackendOptions options;
      options.num_threads = threads;
      const auto started = std::chrono::steady_clock::now();
      CpuBackend backend(model, options);
      r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
      r.peak_mib = (status_kib("VmHWM") - before) / 1024.0;
      r.held_mib = (status_kib("VmRSS") - before) / 1024.0;
      r.threads = backend.num_threads();
    } catch (const ModelError& e) {
      std::fprintf(stderr, "bench_cpu_load: %s\n", e.what());
      code = 1;
    }
    if (code == 0 && ::write(fds[1], &r, sizeof r) != static_cast<ssize_t>(sizeof r)) code = 1;
    ::_exit(code);
  }
  ::close(fds[1]);
  const bool got = ::read(fds[0], out, sizeof *out) == static_cast<ssize_t>(sizeof *out);
  ::close(fds[0]);
  int status = 0;
  ::waitpid(pid, &status, 0);
  return got && WIFEXITED(status) && WEXITSTATUS(status) == 0;
}

// The checkpoint's files: the file, or a folder's .safetensors and .gguf files.
std::vector<std::filesystem::path> checkpoint_files(const std::filesystem::path& model) {
  std::vector<std::filesystem::path> files;
  std::error_code ec;
  if (std::filesystem::is_regular_file(model, ec)) return {model};
  for (const auto& entry : std::filesystem::directory_iterator(model, ec)) {
    const std::string ext = entry.path().extension().string();
    if (entry.is_regular_file() && (ext == ".safetensors" || ext == ".gguf")) files.push_back(entry.path());
  }
  return files;
}

// Drops the files' pages from the page cache; returns the fraction of their pages still cached
// after (mincore), or -1 when a file cannot be opened.
double drop_from_cache(const std::vector<std::filesystem::path>& files) {
  int64_t pages = 0, cached = 0;
  const int64_t page = ::sysconf(_SC_PAGESIZE);
  for (const auto& path : files) {
    const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) return -1;
    ::posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
    struct stat st {};
    ::fstat(fd, &st);
    if (st.st_size > 0) {
      void* map = ::mmap(nullptr, static_cast<size_t>(st.st_size), PROT_READ, MAP_SHARED, fd, 0);
      if (map != MAP_FAILED) {
        std::vector<unsigned char> resident(static_cast<size_t>((st.st_size + page - 1) / page));
        if (::mincore(map, static_cast<size_t>(st.st_size), resident.data()) == 0) {
          for (unsigned char r : resident) cached += r & 1;
        }
        pages += static_cast<int64_t>(resident.size());
        ::munmap(map, static_cast<size_t>(st.st_size));
      }
    }
    ::close(fd);
  }
  return pages > 0 ? static_cast<double>(cached) / static_cast<double>(pages) : 0.0;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<std::string> models;
  int runs = 5, threads = 0;
  bool cold = false;
  std::string out_json;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--runs" && i + 1 < argc) runs = std::atoi(argv[++i]);
    else if (a == "--threads" && i + 1 < argc) threads = std::atoi(argv[++i]);
    else if (a == "--cold") cold = true;
    else if (a == "--out" && i + 1 < argc) out_json = argv[++i];
    else if (!a.starts_with("--")) models.push_back(a);
    else {
      std::fprintf(stderr, "unknown argument %s\n", a.c_str());
      return 2;
    }
  }
  if (models.empty()) {
    std::fprintf(stderr, "usage: bench_cpu_load MODEL [MODEL...] [--runs N] [--threads N] [--cold] [--out FILE.json]\n");
    return 2;
  }
  if (runs < 1 || threads < 0) {
    std::fprintf(stderr, "--runs must be >= 1 and --threads >= 0\n");
    return 2;
  }
  struct Model {
    std::string path;
    std::vector<std::filesystem::path> files;
    double file_mib = 0;
    std::vector<Run> results;
  };
  std::vector<Model> all;
  for (const std::string& m : models) {
    Model model{m, checkpoint_files(m), 0, {}};
    for (const auto& f : model.files) model.file_mib += std::filesystem::file_size(f) / 1048576.0;
    all.push_back(std::move(model));
  }
  // Several models: each run loads every one, the order alternating between runs.
  for (int r = 0; r < runs; ++r) {
    for (size_t k = 0; k < all.size(); ++k) {
      Model& model = all[r % 2 == 0 ? k : all.size() - 1 - k];
      const std::string label = all.size() > 1 ? " " + model.path : "";
      Run run;
      if (cold) {
        const double cached = drop_from_cache(model.files);
        if (cached < 0) {
          std::fprintf(stderr, "bench_cpu_load: cannot open the checkpoint's files to drop them from the cache\n");
          return 1;
        }
        std::printf("run %d%s: %.1f%% of the checkpoint still cached\n", r + 1, label.c_str(), 100 * cached);
      }
      if (!run_child(model.path.c_str(), threads, &run)) {
        std::fprintf(stderr, "bench_cpu_load: run %d of %s failed\n", r + 1, model.path.c_str());
        return 1;
      }
      model.results.push_back(run);
      std::printf("run %d%s: %.3f s, peak %.0f MiB, held %.0f MiB\n", r + 1, label.c_str(), run.seconds, run.peak_mib,
                  run.held_mib);
    }
  }
  for (const Model& model : all) {
    std::vector<double> s, peak, held;
    for (const Run& r : model.results) {
      s.push_back(r.seconds);
      peak.push_back(r.peak_mib);
      held.push_back(r.held_mib);
    }
    std::printf("%s (%.0f MiB), %d threads: median %.3f s (min %.3f, max %.3f), peak %.0f MiB, held %.0f MiB over %d runs\n",
                model.path.c_str(), model.file_mib, model.results.front().threads, median(s),
                *std::min_element(s.begin(), s.end()), *std::max_element(s.begin(), s.end()), median(peak), median(held), runs);
  }
  if (!out_json.empty()) {
    std::ofstream out(out_json);
    // One model: its fields at the top level; several: a list of them. Names only, no folders
    // (no machine's paths).
    const auto write_model = [&](const Model& model) {
      out << "\"model\":\"" << std::filesystem::path(model.path).filename().string() << "\",\"file_mib\":" << model.file_mib
          << ",\"runs\":[";
      for (size_t i = 0; i < model.results.size(); ++i) {
        const Run& r = model.results[i];
        out << (i ? "," : "") << "{\"seconds\":" << r.seconds << ",\"peak_mib\":" << r.peak_mib << ",\"held_mib\":" << r.held_mib
            << "}";
      }
      out << "]";
    };
    out << "{\"benchmark\":\"cpu-load\",\"threads\":" << all.front().results.front().threads
        << ",\"cold\":" << (cold ? "true" : "false") << ",";
    if (all.size() == 1) {
      write_model(all.front());
    } else {
      out << "\"models\":[";
      for (size_t i = 0; i < all.size(); ++i) {
        out << (i ? "," : "") << "{";
        write_model(all[i]);
        out << "}";
      }
      out << "]";
    }
    out << "}\n";
    if (!out) {
      std::fprintf(stderr, "bench_cpu_load: cannot write %s\n", out_json.c_str());
      return 1;
    }
  }
  return 0;
}
