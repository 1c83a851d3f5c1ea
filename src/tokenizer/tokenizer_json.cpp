// tokenizer_from_json: an HF tokenizer.json (+ tokenizer_config.json) -> HfTokenizer.
#include <memory>

#include "core/error.h"
#include "tokenizer/hf_tokenizer.h"

namespace basalt::tok {

namespace {

// tokenizer_config.json writes special tokens as "text" or {"content": "text", ...}.
std::string config_token_text(const nlohmann::json& config, const char* key) {
  auto it = config.find(key);
  if (it == config.end() || it->is_null()) return "";
  if (it->is_string()) return it->get<std::string>();
  if (it->is_object() && it->contains("content")) return it->at("content").get<std::string>();
  return "";
}

bool json_mentions_type(const nlohmann::json& j, const std::string& type) {
  if (j.is_object()) {
    if (j.value("type", "") == type) return true;
    for (const auto& [k, v] : j.items())
      if (json_mentions_type(v, type)) return true;
  } else if (j.is_array()) {
    for (const auto& v : j)
      if (json_mentions_type(v, type)) return true;
  }
  return false;
}

std::unique_ptr<BpeModel> bpe_from_json(const nlohmann::json& m) {
  // Old files have no "type"; HF then guesses from the fields present.
  std::string type = m.value("type", m.contains("merges") ? "BPE" : "");
  if (type != "BPE") fail("[tokenizer] tokenizer.json: unsupported model type '{}'", type);
  for (const char* key : {"continuing_subword_prefix", "end_of_word_suffix"})
    if (m.contains(key) && m[key].is_string() && !m[key].get<std::string>().empty())
      fail("[tokenizer] tokenizer.json: BPE {} is not supported", key);
  BpeOptions opt;
  opt.ignore_merges = m.value("ignore_merges", false);
  opt.byte_fallback = m.value("byte_fallback", false);
  opt.fuse_unk = m.value("fuse_unk", false);
  if (m.contains("unk_token") && m["unk_token"].is_string()) opt.unk_token = m["unk_token"];

  const auto& vocab_json = m.at("vocab");
  std::vector<std::pair<std::string, int32_t>> vocab;
  vocab.reserve(vocab_json.size());
  for (auto it = vocab_json.begin(); it != vocab_json.end(); ++it)
    vocab.emplace_back(it.key(), it.value().get<int32_t>());
  auto model = std::make_unique<BpeModel>(std::move(vocab), opt);

  auto merges = m.find("merges");  // by reference: a copy of 280k merges costs ~100 ms
  if (merges == m.end() || !merges->is_array()) return model;
  model->reserve_merges(merges->size());
  for (const auto& mg : *merges) {
    if (mg.is_array() && mg.size() == 2) {
      model->add_merge(mg[0].get_ref<const std::string&>(), mg[1].get_ref<const std::string&>());
    } else if (mg.is_string()) {
      const std::string& s = mg.get_ref<const std::string&>();
      size_t sp = s.find(' ');
      if (sp == std::string::npos || s.find(' ', sp + 1) != std::string::npos)
        fail("[tokenizer] tokenizer.json: bad merge '{}'", s);
      model->add_merge(std::string_view(s).substr(0, sp), std::string_view(s).substr(sp + 1));
    } else {
      fail("[tokenizer] tokenizer.json: bad merge {}", mg.dump());
    }
  }
  return model;
}

}  // namespace

std::unique_ptr<Tokenizer> tokenizer_from_json(const nlohmann::json& tj,
                                               const nlohmann::json& config) {
  if (!tj.is_object() || !tj.contains("model"))
    fail("[tokenizer] tokenizer.json: no \"model\" object");
  HfPipeline p;
  p.model = bpe_from_json(tj.at("model"));
  p.normalizer = normalizer_from_json(tj.value("normalizer", nlohmann::json()));
  p.pre_tokenizer = pre_tokenizer_from_json(tj.value("pre_tokenizer", nlohmann::json()));
  p.decoder = decoder_from_json(tj.value("decoder", nlohmann::json()));
  p.post = post_processor_from_json(tj.value("post_processor", nlohmann::json()));
  for (const auto& a : tj.value("added_tokens", nlohmann::json::array())) {
    AddedToken t;
    t.id = a.at("id");
    t.content = a.at("content");
    t.special = a.value("special", false);
    t.lstrip = a.value("lstrip", false);
    t.rstrip = a.value("rstrip", false);
    t.normalized = a.value("normalized", false);
    t.single_word = a.value("single_word", false);
    p.added.add(std::move(t));
  }

  bool byte_level = json_mentions_type(tj.value("pre_tokenizer", nlohmann::json()), "ByteLevel") ||
                    json_mentions_type(tj.value("decoder", nlohmann::json()), "ByteLevel");
  p.type_name = byte_level                 ? "byte-level BPE"
                : p.model->byte_fallback() ? "SentencePiece BPE"
                                           : "BPE";

  auto lookup = [&](const std::string& text) {
    if (text.empty()) return -1;
    int32_t id = p.added.find(text);
    return id >= 0 ? id : p.model->token_to_id(text);
  };
  const nlohmann::json cfg = config.is_object() ? config : nlohmann::json::object();
  p.bos_id = lookup(config_token_text(cfg, "bos_token"));
  p.eos_id = lookup(config_token_text(cfg, "eos_token"));
  p.pad_id = lookup(config_token_text(cfg, "pad_token"));
  // Without a config, the post-processor template names the BOS / EOS it adds.
  if (p.bos_id < 0 && !cfg.contains("bos_token") && !p.post.prefix.empty())
    p.bos_id = p.post.prefix.front();
  if (p.eos_id < 0 && !cfg.contains("eos_token") && !p.post.suffix.empty())
    p.eos_id = p.post.suffix.back();
  // add_bos_token / add_eos_token, when the config has them, decide what add_special adds
  // (transformers rebuilds the post-processor from them, e.g. LlamaTokenizerFast); otherwise
  // the tokenizer.json post-processor does.
  if (cfg.contains("add_bos_token") && cfg["add_bos_token"].is_boolean()) {
    p.post.prefix.clear();
    if (cfg["add_bos_token"].get<bool>() && p.bos_id >= 0) p.post.prefix.push_back(p.bos_id);
  }
  if (cfg.contains("add_eos_token") && cfg["add_eos_token"].is_boolean()) {
    p.post.suffix.clear();
    if (cfg["add_eos_token"].get<bool>() && p.eos_id >= 0) p.post.suffix.push_back(p.eos_id);
  }
  return std::make_unique<HfTokenizer>(std::move(p));
}

}  // namespace basalt::tok
