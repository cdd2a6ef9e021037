// A 4-bit AWQ or GPTQ copy of a float safetensors model, for benchmarks and checks of the
// int4 loaders (int4_weights.h) on shapes no test model has (a Llama-3.2-1B- or 8B-shaped
// random model). The weights are rounded to nearest per group (tests/int4_writer.h), not
// calibrated as AutoAWQ or GPTQ would: the layout is theirs, the accuracy is not.
//
//   make_int4_checkpoint SRC_DIR OUT_DIR [--method awq|gptq] [--group N] [--sym] [--act-order] [--v2]
//
// OUT_DIR gets config.json with a quantization_config, model.safetensors, and SRC_DIR's other
// files (tokenizer, generation config) copied. One line per quantized weight on stderr.
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <string>

#include "int4_writer.h"
#include "strata/model_error.h"

int main(int argc, char** argv) {
  const auto usage = [] {
    std::fprintf(stderr,
                 "usage: make_int4_checkpoint SRC_DIR OUT_DIR [--method awq|gptq] [--group N] [--sym] [--act-order] [--v2]\n");
    return 2;
  };
  if (argc < 3) return usage();
  const std::filesystem::path source = argv[1], out = argv[2];
  strata_test::Spec spec;
  for (int i = 3; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--method" && i + 1 < argc) spec.method = argv[++i];
    else if (arg == "--group" && i + 1 < argc) spec.group = std::stoll(argv[++i]);
    else if (arg == "--sym") spec.symmetric = true;
    else if (arg == "--act-order") spec.act_order = true;
    else if (arg == "--v2") spec.v1 = false;
    else return usage();
  }
  if ((spec.method != "awq" && spec.method != "gptq") || spec.group <= 0 || spec.group % 32 != 0 ||
      (spec.method == "awq" && (spec.symmetric || spec.act_order || !spec.v1))) {
    std::fprintf(stderr, "--method is awq or gptq, --group a positive multiple of 32; --sym, --act-order and --v2 are GPTQ's\n");
    return 2;
  }
  if (std::filesystem::exists(out / "model.safetensors")) {
    std::fprintf(stderr, "%s already holds a model.safetensors; not overwriting it\n", out.c_str());
    return 1;
  }
  try {
    const auto started = std::chrono::steady_clock::now();
    std::filesystem::create_directories(out);
    size_t done = 0;
    const strata_test::Checkpoint c = strata_test::make_checkpoint(source, spec, false, [&](const std::string& name) {
      const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
      std::fprintf(stderr, "[%6.1f s] %zu quantized: %s\n", s, ++done, name.c_str());
    });
    c.write(out);
    for (const auto& e : std::filesystem::directory_iterator(source)) {
      const std::string name = e.path().filename().string();
      if (!e.is_regular_file() || name == "config.json" || name.ends_with(".safetensors") ||
          name == "model.safetensors.index.json")
        continue;
      std::filesystem::copy_file(e.path(), out / name, std::filesystem::copy_options::overwrite_existing);
    }
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
    std::fprintf(stderr, "wrote %s (quantization_config %s) in %.1f s\n", out.c_str(),
                 strata_test::quantization_json(spec).c_str(), s);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "make_int4_checkpoint: %s\n", e.what());
    return 1;
  }
  return 0;
}
