// basalt: LLM inference engine. `basalt --help` lists the subcommands.
#include <cstdio>
#include <map>

#include "cli/commands.h"
#include "core/error.h"
#include "core/log.h"

int main(int argc, char** argv) {
  CLI::App app{"basalt: exact, fast LLM inference (CPU; CUDA backend in progress)", "basalt"};
  app.require_subcommand(1);
  int verbosity = 0;
  app.add_flag("-v,--verbose", verbosity, "More logging on stderr (-v info, -vv debug)");
  std::map<CLI::App*, basalt::cli::Runner> runners;
  for (auto add : {basalt::cli::add_generate, basalt::cli::add_tokenize,
                   basalt::cli::add_detokenize, basalt::cli::add_logits, basalt::cli::add_info,
                   basalt::cli::add_bench, basalt::cli::add_synth, basalt::cli::add_quantize,
                   basalt::cli::add_perplexity, basalt::cli::add_serve, basalt::cli::add_env,
                   basalt::cli::add_run, basalt::cli::add_tune}) {
    auto before = app.get_subcommands({});
    basalt::cli::Runner r = add(app);
    for (CLI::App* sc : app.get_subcommands({}))
      if (std::find(before.begin(), before.end(), sc) == before.end()) runners[sc] = r;
  }
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }
  basalt::log_init(verbosity);
  try {
    for (CLI::App* sc : app.get_subcommands())
      if (runners.count(sc)) return runners[sc]();
  } catch (const basalt::Error& e) {
    std::fflush(stdout);
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  } catch (const std::exception& e) {
    std::fflush(stdout);
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
  return 0;
}
