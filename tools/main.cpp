// iwarp-cm: the command line. Read first: README.md.
#include <CLI/CLI.hpp>

#include "tools/commands.hpp"

int main(int argc, char** argv) {
    CLI::App app{"iwarp-cm: a userspace iWARP connection manager (TCP + MPA v1/v2)"};
    app.require_subcommand(1);
    iwcm::tools::add_demo(app);
    iwcm::tools::add_sim(app);
    iwcm::tools::add_listen(app); iwcm::tools::add_connect(app);
    iwcm::tools::add_bench(app);
    CLI11_PARSE(app, argc, argv);
    return iwcm::tools::exit_code();
}
