// 4-bit AWQ and GPTQ checkpoints (int4_weights.h). The tests quantize tinystories-656k's real
// weights themselves (round to nearest per group) and pack them as AutoAWQ and AutoGPTQ lay them
// out, written here from the formats' definitions, independently of the loader's reading:
// - words written by hand decode to the values the formats define;
// - a checkpoint's blocks are the blocks of the test's own integers, so the CPU backend's logits
//   on the checkpoint equal, bit for bit, those of a ModelWeights holding those blocks;
// - act-order (GPTQ desc_act) checkpoints: their weights dequantize to the test's values, and the
//   backend's logits are as close to the dequantized fp32 model's as without act-order;
// - every malformed checkpoint is refused, naming the tensor or field.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <map>
#include <numeric>
#include <random>
#include <string>

#include "check.h"
#include "int4_writer.h"
#include "model_files.h"
#include "strata/cpu_backend.h"
#include "strata/float_convert.h"
#include "strata/int4_weights.h"
#include "strata/model_config.h"
#include "strata/model_error.h"
#include "strata/model_weights.h"
#include "strata/safetensors.h"
#include "tensor_slots.h"

using namespace strata;
using strata_test::RawTensor;
using strata_test::TempDir;
using namespace strata_test;

namespace {

bool same_text(const std::string& got, const std::string& want) {
  if (got != want) std::printf("  got \"%s\", want \"%s\"\n", got.c_str(), want.c_str());
  return got == want;
}

const char* models_dir() { return std::getenv("STRATA_MODELS_DIR"); }

std::vector<float> prompt_logits(CpuBackend& backend, const std::vector<std::vector<int32_t>>& prompts) {
  backend.allocate_kv(8, 16);
  StepBatch batch;
  std::vector<std::vector<int32_t>> tables;
  for (size_t i = 0; i < prompts.size(); ++i) tables.push_back({static_cast<int32_t>(2 * i), static_cast<int32_t>(2 * i + 1)});
  for (size_t i = 0; i < prompts.size(); ++i) {
    batch.seqs.push_back({prompts[i].data(), static_cast<int32_t>(prompts[i].size()), 0, tables[i].data(), 2, true});
  }
  std::vector<float> logits(prompts.size() * backend.config().vocab_size);
  backend.forward(batch, logits.data());
  return logits;
}

const std::vector<std::vector<int32_t>> kPrompts = {{1, 80, 147, 201, 282, 215, 286, 598, 629, 10},
                                                    {1, 415, 13, 29, 600, 71, 9, 1023, 2000, 7, 77, 300}};

double max_diff(const std::vector<float>& a, const std::vector<float>& b) {
  double most = 0.0;
  for (size_t i = 0; i < a.size(); ++i) most = std::max(most, std::fabs(static_cast<double>(a[i]) - b[i]));
  return most;
}

// The model of `c` with its linear weights replaced: blocks (quantized) or fp32 values.
ModelWeights with_linears(const Checkpoint& c, bool blocks, QuantType type) {
  ModelWeights w = load_model_weights(std::filesystem::path(models_dir()) / "tinystories-656k", c.config);
  for (TensorSlot& slot : tensor_slots(c.config, &w)) {
    const auto it = c.weights.find(slot.name);
    if (it == c.weights.end()) continue;
    if (blocks) {
      std::vector<float>().swap(*slot.target);
      w.quantized.emplace(slot.name, blocks_of(it->second, type));
    } else {
      for (int64_t j = 0; j < it->second.n; ++j)
        for (int64_t f = 0; f < it->second.k; ++f) (*slot.target)[j * it->second.k + f] = it->second.value(j, f);
    }
  }
  return w;
}

bool fails_with(const std::function<void()>& fn, const std::string& code, const std::vector<std::string>& parts) {
  try {
    fn();
  } catch (const ModelError& e) {
    bool ok = e.code() == code;
    for (const std::string& part : parts) ok = ok && std::string(e.what()).find(part) != std::string::npos;
    if (!ok) std::printf("  unexpected %s: %s\n", e.code().c_str(), e.what());
    return ok;
  }
  std::printf("  no error\n");
  return false;
}

}  // namespace

TEST_CASE("int4: words written by hand decode as AWQ and GPTQ define them") {
  // One matrix of 8 rows and 32 features, one group: the smallest a checkpoint can have.
  const std::string config = R"({"architectures": ["LlamaForCausalLM"], "vocab_size": 32, "hidden_size": 32,
    "intermediate_size": 32, "num_hidden_layers": 1, "num_attention_heads": 4, "num_key_value_heads": 1,
    "head_dim": 8, "max_position_embeddings": 64, "tie_word_embeddings": true, "quantization_config": )";
  const auto floats = [](int64_t count, float v) { return strata_test::encode(std::vector<float>(count, v), "F32"); };
  const auto halves = [](int64_t count, float v) { return u16_bytes(std::vector<uint16_t>(count, f32_to_f16(v))); };
  for (const std::string method : {"awq", "gptq"}) {
    TempDir dir("int4-hand");
    strata_test::write_file(dir.path() / "config.json",
                            config + (method == "awq" ? R"({"quant_method": "awq", "bits": 4, "group_size": 32}})"
                                                      : R"({"quant_method": "gptq", "bits": 4, "group_size": 32, "sym": false}})"));
    std::vector<RawTensor> tensors = {{"model.embed_tokens.weight", "F32", {32, 32}, floats(32 * 32, 0.5f)},
                                      {"model.norm.weight", "F32", {32}, floats(32, 1.0f)}};
    const std::string p = "model.layers.0.";
    for (const char* norm : {"input_layernorm.weight", "post_attention_layernorm.weight"}) {
      tensors.push_back({p + norm, "F32", {32}, floats(32, 1.0f)});
    }
    // Every linear is 8 rows by 32 features here, except q/o/gate/up/down's other sizes: write
    // them all by hand with one word pattern each.
    const struct { const char* name; int64_t n, k; } linears[] = {
        {"self_attn.q_proj", 32, 32}, {"self_attn.k_proj", 8, 32}, {"self_attn.v_proj", 8, 32}, {"self_attn.o_proj", 32, 32},
        {"mlp.gate_proj", 32, 32},    {"mlp.up_proj", 32, 32},     {"mlp.down_proj", 32, 32}};
    for (const auto& l : linears) {
      const std::string prefix = p + l.name;
      // The word 0x76543210 everywhere: nibble i holds i. Zero points: nibble i holds i too.
      if (method == "awq") {
        tensors.push_back({prefix + ".qweight", "I32", {l.k, l.n / 8}, i32_bytes(std::vector<uint32_t>(l.k * l.n / 8, 0x76543210u))});
      } else {
        tensors.push_back({prefix + ".qweight", "I32", {l.k / 8, l.n}, i32_bytes(std::vector<uint32_t>(l.k / 8 * l.n, 0x76543210u))});
      }
      tensors.push_back({prefix + ".qzeros", "I32", {1, l.n / 8}, i32_bytes(std::vector<uint32_t>(l.n / 8, 0x76543210u))});
      tensors.push_back({prefix + ".scales", "F16", {1, l.n}, halves(l.n, 0.5f)});
    }
    strata_test::write_safetensors(dir.path() / "model.safetensors", tensors);
    const ModelConfig c = load_model_config(dir.path());
    const SafetensorsArchive archive = SafetensorsArchive::open_model_dir(dir.path());
    Int4Checkpoint checkpoint(archive, c, {});
    CHECK_EQ(checkpoint.quantized_names().size(), size_t{7});
    const std::vector<float> k = checkpoint.dequantize(p + "self_attn.k_proj.weight");
    bool as_defined = true;
    for (int64_t j = 0; j < 8; ++j) {
      for (int64_t f = 0; f < 32; ++f) {
        float want;
        if (method == "awq") {
          // Row j is nibble i where kAwqOrder[i] == j: rows 0..7 hold 0, 4, 1, 5, 2, 6, 3, 7,
          // and their zero points the same.
          const float q = static_cast<float>(std::find(kAwqOrder, kAwqOrder + 8, j) - kAwqOrder);
          want = (q - q) * 0.5f;
          // Zero and value share the nibble position, so every value is 0: check the zero
          // points apart below.
        } else {
          // Feature f is nibble f % 8; row j's zero point is nibble j, stored minus one.
          want = (static_cast<float>(f % 8) - static_cast<float>(j + 1)) * 0.5f;
        }
        as_defined = as_defined && k[j * 32 + f] == want;
      }
    }
    CHECK(as_defined);
    if (method == "awq") {
      // The blocks' m = -z * s says each row's zero point: row j's is the nibble AWQ puts it in.
      const QuantMatrix blocks = checkpoint.blocks(p + "self_attn.v_proj.weight");
      CHECK(blocks.type == QuantType::Q4_1);
      bool zeros = true;
      for (int64_t j = 0; j < 8; ++j) {
        BlockQ4_1 block;
        std::memcpy(&block, blocks.row(j), sizeof block);
        const float z = static_cast<float>(std::find(kAwqOrder, kAwqOrder + 8, j) - kAwqOrder);
        zeros = zeros && f16_to_f32(block.m) == -z * 0.5f && f16_to_f32(block.d) == 0.5f;
        zeros = zeros && (block.qs[0] & 15) == static_cast<int>(z) && (block.qs[0] >> 4) == static_cast<int>(z);
      }
      CHECK(zeros);
    }
  }
}

TEST_CASE("int4: AWQ and GPTQ checkpoints of tinystories-656k give the logits of their own blocks, bit for bit") {
  if (models_dir() == nullptr) return strata_test::skip("tinystories-656k not found (STRATA_MODELS_DIR unset)");
  const std::filesystem::path source = std::filesystem::path(models_dir()) / "tinystories-656k";
  const struct {
    Spec spec;
    QuantType type;
    const char* format;
  } cases[] = {
      {{"awq", 128, false, true, false}, QuantType::Q4_1, "awq int4, groups of 128: Q4_1"},
      {{"awq", 32, false, true, false}, QuantType::Q4_1, "awq int4, groups of 32: Q4_1"},
      {{"gptq", 64, true, true, false}, QuantType::Q4_0, "gptq int4, groups of 64: Q4_0"},
      {{"gptq", 128, false, true, false}, QuantType::Q4_1, "gptq int4, groups of 128: Q4_1"},
      {{"gptq", 32, false, false, false}, QuantType::Q4_1, "gptq int4, groups of 32: Q4_1"},
  };
  for (const auto& c : cases) {
    TempDir dir("int4");
    const Checkpoint checkpoint = make_checkpoint(source, c.spec);
    checkpoint.write(dir.path());
    int64_t progress[2] = {0, 0};
    CpuBackend loaded(dir.path(), CpuBackendOptions{1, CpuKvDtype::kAuto, LoadProgress(progress)});
    CpuBackend reference(checkpoint.config, with_linears(checkpoint, true, c.type), CpuBackendOptions{1});
    CpuBackend dense(checkpoint.config, with_linears(checkpoint, false, c.type), CpuBackendOptions{1});
    const std::vector<float> got = prompt_logits(loaded, kPrompts);
    const std::vector<float> want = prompt_logits(reference, kPrompts);
    const std::vector<float> fp32 = prompt_logits(dense, kPrompts);
    std::printf("  %s: \"%s\", max |logit - blocks' logit| %.3g, - fp32 dequantized %.3g\n", quantization_json(c.spec).c_str(),
                loaded.weights_format().c_str(), max_diff(got, want), max_diff(got, fp32));
    CHECK_EQ(max_diff(got, want), 0.0);
    CHECK(same_text(loaded.weights_format(), c.format));
    CHECK(same_text(loaded.kv_cache_dtype(), "float16"));  // as a GGUF model's
    CHECK(progress[1] > 0 && progress[0] == progress[1]);
    CHECK(max_diff(got, fp32) < 0.25);  // the 8-bit activations' error, not a wrong weight
  }
}

TEST_CASE("int4: GPTQ act-order checkpoints dequantize exactly and run as close to fp32 as without act-order") {
  if (models_dir() == nullptr) return strata_test::skip("tinystories-656k not found (STRATA_MODELS_DIR unset)");
  const std::filesystem::path source = std::filesystem::path(models_dir()) / "tinystories-656k";
  // q/k/v (and gate/up) sharing their input's order, as GPTQ's do: every GEMM gathers its input.
  // Each weight with an order of its own: the fused q/k/v and gate/up are dequantized to fp32.
  for (const auto& [symmetric, shared] : {std::pair{true, true}, std::pair{false, true}, std::pair{false, false}}) {
    Spec spec{"gptq", 32, symmetric, true, true, shared};
    const QuantType type = symmetric ? QuantType::Q4_0 : QuantType::Q4_1;
    TempDir dir("int4-act");
    const Checkpoint checkpoint = make_checkpoint(source, spec);
    checkpoint.write(dir.path());
    {
      const SafetensorsArchive archive = SafetensorsArchive::open_model_dir(dir.path());
      const ModelConfig config = load_model_config(dir.path());
      Int4Checkpoint reader(archive, config, {});
      bool exact = true, ordered = true;
      for (const auto& [name, w] : checkpoint.weights) {
        const std::vector<float> values = reader.dequantize(name);
        for (int64_t j = 0; j < w.n; ++j)
          for (int64_t f = 0; f < w.k; ++f) exact = exact && values[j * w.k + f] == w.value(j, f);
        // The blocks' columns follow input_order: column c is feature order[c], groups contiguous.
        const std::vector<int32_t>& order = reader.input_order(name);
        ordered = ordered && static_cast<int64_t>(order.size()) == w.k;
        for (int64_t c = 0; ordered && c < w.k; ++c) ordered = w.group_of[order[c]] == c / w.group;
      }
      CHECK(exact);
      CHECK(ordered);
      CHECK(same_text(reader.description(), "gptq int4, act-order, groups of 32"));
    }
    CpuBackend loaded(dir.path(), CpuBackendOptions{1});
    CpuBackend dense(checkpoint.config, with_linears(checkpoint, false, type), CpuBackendOptions{1});
    const double act_order_error = max_diff(prompt_logits(loaded, kPrompts), prompt_logits(dense, kPrompts));
    // The same weights' blocks without act-order are out of reach (their groups differ), so the
    // yardstick is the kernels' own error on a plain checkpoint of the same groups.
    spec.act_order = false;
    const Checkpoint plain = make_checkpoint(source, spec);
    CpuBackend plain_blocks(plain.config, with_linears(plain, true, type), CpuBackendOptions{1});
    CpuBackend plain_dense(plain.config, with_linears(plain, false, type), CpuBackendOptions{1});
    const double plain_error = max_diff(prompt_logits(plain_blocks, kPrompts), prompt_logits(plain_dense, kPrompts));
    std::printf("  %s, %s orders: max |logit - fp32 dequantized| act-order %.3g, plain %.3g (\"%s\")\n",
                symmetric ? "sym" : "asym", shared ? "shared" : "own", act_order_error, plain_error,
                loaded.weights_format().c_str());
    CHECK(act_order_error < 3.0 * plain_error + 0.02);
  }
}

TEST_CASE("int4: config.json's quantization_config is read, and what is not supported is refused naming the field") {
  const std::string base = R"({"architectures": ["LlamaForCausalLM"], "vocab_size": 32, "hidden_size": 32,
    "intermediate_size": 64, "num_hidden_layers": 1, "num_attention_heads": 4, "max_position_embeddings": 64)";
  const auto parse = [&](const std::string& q) { return parse_model_config(base + ", \"quantization_config\": " + q + "}", "c.json"); };
  ModelConfig awq = parse(R"({"quant_method": "awq", "bits": 4, "group_size": 128, "version": "GEMM", "zero_point": true})");
  CHECK(same_text(awq.quantization.method, "awq"));
  CHECK_EQ(awq.quantization.group_size, 128);
  ModelConfig gptq = parse(R"({"quant_method": "gptq", "bits": 4, "group_size": -1, "desc_act": true})");
  CHECK(gptq.quantization.symmetric && gptq.quantization.zeros_minus_one && gptq.quantization.group_size == -1);
  CHECK(!parse(R"({"quant_method": "gptq", "bits": 4, "group_size": 32, "sym": false, "checkpoint_format": "gptq_v2"})")
             .quantization.zeros_minus_one);
  CHECK(parse_model_config(base + "}", "c.json").quantization.method.empty());
  const std::string code = model_error_code::kConfig;
  CHECK(fails_with([&] { parse(R"({"quant_method": "fp8"})"); }, code, {"quantization_config.quant_method", "fp8", "awq"}));
  CHECK(fails_with([&] { parse(R"({"quant_method": "gptq", "bits": 8, "group_size": 128})"); }, code, {"quantization_config.bits", "4"}));
  CHECK(fails_with([&] { parse(R"({"quant_method": "awq", "bits": 4, "group_size": 48})"); }, code, {"group_size", "multiple of 32"}));
  CHECK(fails_with([&] { parse(R"({"quant_method": "awq", "bits": 4})"); }, code, {"group_size", "missing"}));
  CHECK(fails_with([&] { parse(R"({"quant_method": "awq", "bits": 4, "group_size": 128, "version": "gemv"})"); }, code,
                   {"quantization_config.version", "gemv"}));
  CHECK(fails_with([&] { parse(R"({"quant_method": "awq", "bits": 4, "group_size": 128, "zero_point": false})"); }, code,
                   {"zero_point"}));
  CHECK(fails_with([&] { parse(R"({"quant_method": "gptq", "bits": 4, "group_size": 128, "checkpoint_format": "marlin"})"); },
                   code, {"checkpoint_format", "marlin"}));
  CHECK(fails_with([&] { parse(R"("awq")"); }, code, {"quantization_config"}));

  // Older checkpoints: AutoGPTQ's quantize_config.json and AutoAWQ's quant_config.json beside a
  // config.json without quantization_config, their method implied by the file.
  TempDir dir("int4-config");
  strata_test::write_file(dir.path() / "config.json", base + "}");
  strata_test::write_file(dir.path() / "quantize_config.json",
                          R"({"bits": 4, "group_size": 128, "desc_act": true, "sym": false, "true_sequential": true})");
  ModelConfig autogptq = load_model_config(dir.path());
  CHECK(same_text(autogptq.quantization.method, "gptq"));
  CHECK(autogptq.quantization.group_size == 128 && !autogptq.quantization.symmetric && autogptq.quantization.zeros_minus_one);
  std::filesystem::remove(dir.path() / "quantize_config.json");
  strata_test::write_file(dir.path() / "quant_config.json", R"({"zero_point": true, "q_group_size": 64, "w_bit": 4, "version": "GEMM"})");
  ModelConfig autoawq = load_model_config(dir.path());
  CHECK(same_text(autoawq.quantization.method, "awq"));
  CHECK_EQ(autoawq.quantization.group_size, 64);
  strata_test::write_file(dir.path() / "quant_config.json", R"({"zero_point": true, "q_group_size": 64, "w_bit": 3})");
  CHECK(fails_with([&] { load_model_config(dir.path()); }, code, {"quant_config.json", "field \"bits\"", "4"}));
  // config.json's quantization_config wins over the files.
  strata_test::write_file(dir.path() / "config.json",
                          base + R"(, "quantization_config": {"quant_method": "gptq", "bits": 4, "group_size": 32}})");
  CHECK_EQ(load_model_config(dir.path()).quantization.group_size, 32);
}

TEST_CASE("int4: malformed checkpoints are refused naming the tensor") {
  if (models_dir() == nullptr) return strata_test::skip("tinystories-656k not found (STRATA_MODELS_DIR unset)");
  const std::filesystem::path source = std::filesystem::path(models_dir()) / "tinystories-656k";
  const std::string code = model_error_code::kWeights;
  const std::string q = "model.layers.0.self_attn.q_proj";
  const auto refused = [&](const Spec& spec, const std::function<void(Checkpoint&)>& spoil, const std::vector<std::string>& parts) {
    TempDir dir("int4-bad");
    Checkpoint c = make_checkpoint(source, spec);
    spoil(c);
    c.write(dir.path());
    return fails_with([&] { CpuBackend backend(dir.path(), CpuBackendOptions{1}); }, code, parts);
  };
  const Spec awq{"awq", 128, false, true, false}, gptq{"gptq", 64, true, true, false};
  CHECK(refused(awq, [&](Checkpoint& c) { c.find(q + ".scales")->dtype = "BF16"; }, {q + ".scales", "BF16", "F16"}));
  CHECK(refused(awq, [&](Checkpoint& c) {
    RawTensor* t = c.find(q + ".qzeros");
    t->name = q + ".qzeros_gone";
  }, {"missing tensor", q + ".qzeros"}));
  CHECK(refused(awq, [&](Checkpoint& c) { c.find(q + ".qweight")->shape = {16, 128}; }, {q + ".qweight", "[16, 128]", "[128, 16]"}));
  CHECK(refused(awq, [&](Checkpoint& c) { c.tensors.push_back({q + ".g_idx", "I32", {128}, std::string(512, '\0')}); },
                {q + ".g_idx", "AWQ"}));
  // sym: true, but one zero point is not 8.
  CHECK(refused(gptq, [&](Checkpoint& c) { c.find(q + ".qzeros")->bytes[0] = 0x00; }, {q + ".qzeros", "sym: true"}));
  // A g_idx naming a group that does not exist, and one whose groups are not all group_size.
  CHECK(refused(gptq, [&](Checkpoint& c) { c.find(q + ".g_idx")->bytes[0] = 9; }, {q + ".g_idx", "group 9"}));
  CHECK(refused(gptq, [&](Checkpoint& c) { c.find(q + ".g_idx")->bytes[0] = 1; }, {q + ".g_idx", "act-order", "group 0 has 63"}));
  // A bias where the config has none: let go when zero, refused otherwise.
  {
    TempDir dir("int4-bias");
    Checkpoint c = make_checkpoint(source, gptq);
    c.tensors.push_back({q + ".bias", "F16", {128}, std::string(256, '\0')});
    c.write(dir.path());
    CpuBackend backend(dir.path(), CpuBackendOptions{1});
    CHECK(same_text(backend.weights_format(), "gptq int4, groups of 64: Q4_0"));
  }
  CHECK(refused(gptq, [&](Checkpoint& c) {
    c.tensors.push_back({q + ".bias", "F32", {128}, strata_test::encode(std::vector<float>(128, 0.25f), "F32")});
  }, {q + ".bias", "not zero"}));
  // A tensor the model does not have, and a checkpoint with no quantized weight at all.
  CHECK(refused(awq, [&](Checkpoint& c) { c.tensors.push_back({"model.layers.0.extra.qweight", "I32", {1}, std::string(4, '\0')}); },
                {"model.layers.0.extra.qweight", "not part of the model"}));
  CHECK(refused(awq, [&](Checkpoint& c) {
    c.tensors.clear();
    const SafetensorsArchive archive = SafetensorsArchive::open_model_dir(source);
    for (const TensorInfo& info : archive.tensors()) {
      c.tensors.push_back({info.name, info.dtype, info.shape, std::string(reinterpret_cast<const char*>(info.data), info.nbytes)});
    }
  }, {"quantization_config says awq", "qweight"}));
}

TEST_MAIN()
