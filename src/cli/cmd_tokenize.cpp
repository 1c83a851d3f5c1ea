// basalt tokenize / detokenize.
#include <cstdio>

#include "cli/commands.h"
#include "tokenizer/tokenizer.h"

namespace basalt::cli {
namespace {

struct TokenizeArgs {
  std::string model, text;
  bool ids_only = false, add_special = false, no_parse_special = false;
};

int run_tokenize(const TokenizeArgs& a) {
  auto tok = tok::tokenizer_load(a.model);
  const auto ids = tok->encode(a.text, a.add_special, !a.no_parse_special);
  if (a.ids_only) {
    std::string s = "[";
    for (size_t i = 0; i < ids.size(); ++i) s += (i ? ", " : "") + std::to_string(ids[i]);
    std::printf("%s]\n", s.c_str());
    return 0;
  }
  for (int32_t id : ids) {
    const int32_t one[1] = {id};
    std::printf("%6d -> '%s'\n", id, tok->decode(one).c_str());
  }
  return 0;
}

struct DetokenizeArgs {
  std::string model, ids;
  bool skip_special = false;
};

int run_detokenize(const DetokenizeArgs& a) {
  auto tok = tok::tokenizer_load(a.model);
  const std::string s = tok->decode(parse_ids(a.ids), a.skip_special);
  std::fwrite(s.data(), 1, s.size(), stdout);
  std::fputc('\n', stdout);
  return 0;
}

}  // namespace

Runner add_tokenize(CLI::App& app) {
  auto a = std::make_shared<TokenizeArgs>();
  CLI::App* sc = app.add_subcommand("tokenize", "Print the token ids of a text");
  sc->add_option("-m,--model", a->model,
                 "Model dir, tokenizer.json, or .gguf (vocab-only too); default: embedded model");
  sc->add_option("--text", a->text, "Text to tokenize")->required();
  sc->add_flag("--ids-only", a->ids_only, "Print only the list of ids");
  sc->add_flag("--add-special", a->add_special, "Add BOS/EOS as the tokenizer config says");
  sc->add_flag("--no-parse-special", a->no_parse_special,
               "Treat special-token text like <|im_start|> as plain text");
  return [a] { return run_tokenize(*a); };
}

Runner add_detokenize(CLI::App& app) {
  auto a = std::make_shared<DetokenizeArgs>();
  CLI::App* sc = app.add_subcommand("detokenize", "Print the text of token ids");
  sc->add_option("-m,--model", a->model, "Model dir, tokenizer.json, or .gguf");
  sc->add_option("--ids", a->ids, "Token ids: 1,2,3 or \"[1, 2, 3]\"")->required();
  sc->add_flag("--skip-special", a->skip_special, "Leave special tokens out");
  return [a] { return run_detokenize(*a); };
}

}  // namespace basalt::cli
