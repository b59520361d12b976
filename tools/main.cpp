// iwarp-cm: the command line. Read first: docs/cli.md, tools/commands.hpp.
// Every usage error, from CLI11 or from a subcommand's own checks, ends here
// as one line on stderr and exit code 2; CLI11's own exit codes never leave.
#include <CLI/CLI.hpp>
#include <cstdio>

#include "tools/commands.hpp"

#ifndef IWCM_VERSION
#error "IWCM_VERSION is set by tools/CMakeLists.txt from the project version"
#endif

namespace {

using namespace iwcm::tools;

int usage(const std::string& what, const std::string& command) {
    std::string line = what;
    for (char& c : line)
        if (c == '\n') c = ' ';
    std::fprintf(stderr, "iwarp-cm: %s (see iwarp-cm %s--help)\n", line.c_str(),
                 command.empty() ? "" : (command + " ").c_str());
    return exit_codes::kUsage;
}

CLI::App* find_command(CLI::App& app, const std::string& name) {
    for (CLI::App* sub : app.get_subcommands([](CLI::App*) { return true; }))
        if (sub->get_name() == name) return sub;
    return nullptr;
}

// `iwarp-cm help [COMMAND]`: the same text as `iwarp-cm [COMMAND] --help`.
void add_help(CLI::App& app) {
    auto name = std::make_shared<std::string>();
    CLI::App* cmd = app.add_subcommand("help", "show the help of iwarp-cm or of one command");
    cmd->add_option("command", *name, "the command to explain");
    cmd->footer(help_footer("iwarp-cm help connect"));
    cmd->callback([&app, name] {
        if (name->empty()) {
            std::fputs(app.get_formatter()
                           ->make_help(&app, app.get_name(), CLI::AppFormatMode::Normal)
                           .c_str(),
                       stdout);
            return;
        }
        CLI::App* sub = find_command(app, *name);
        if (sub == nullptr) throw UsageError{"unknown command '" + *name + "'"};
        std::fputs(sub->help(app.get_name()).c_str(), stdout);
    });
}

std::string command_names(CLI::App& app) {
    std::string s;
    for (const CLI::App* sub : app.get_subcommands([](CLI::App*) { return true; }))
        s += (s.empty() ? "" : ", ") + sub->get_name();
    return s;
}

// The subcommand being parsed when an error came, for the hint.
std::string current_command(CLI::App& app) {
    for (const CLI::App* sub : app.get_subcommands([](CLI::App*) { return true; }))
        if (sub->parsed()) return sub->get_name();
    return {};
}

}  // namespace

int main(int argc, char** argv) {
    CLI::App app{"iwarp-cm: a userspace iWARP connection manager (TCP + MPA v1/v2)", "iwarp-cm"};
    app.option_defaults()->always_capture_default();
    app.set_version_flag("--version", "iwarp-cm " IWCM_VERSION, "print the version and exit");
    app.require_subcommand(1);
    app.footer(help_footer("iwarp-cm demo --loss 0.2"));
    add_demo(app);
    add_sim(app);
    add_listen(app);
    add_connect(app);
    add_rping(app);
    add_switch(app);
    add_bench(app);
    add_run(app);
    add_help(app);
    if (argc > 1 && argv[1][0] != '-' && find_command(app, argv[1]) == nullptr)
        return usage(
            "unknown command '" + std::string(argv[1]) + "' (commands: " + command_names(app) + ")",
            "");
    // Before a command only --help and --version are known; CLI11 would name
    // the missing command instead of the option it does not know.
    if (argc > 1 && argv[1][0] == '-' && app.get_option_no_throw(argv[1]) == nullptr)
        return usage("unknown option '" + std::string(argv[1]) +
                         "' (before a command: --help, --version; commands: " + command_names(app) +
                         ")",
                     "");
    // What follows run's options is the program's command line.
    if (argc > 1 && std::string(argv[1]) == "run") argc = split_run_command(app, argc, argv);
    try {
        app.parse(argc, argv);
    } catch (const CLI::CallForHelp& e) {
        return app.exit(e);
    } catch (const CLI::CallForAllHelp& e) {
        return app.exit(e);
    } catch (const CLI::CallForVersion& e) {
        return app.exit(e);
    } catch (const CLI::RequiredError& e) {
        const std::string cmd = current_command(app);
        return usage(
            cmd.empty() ? "a command is required (commands: " + command_names(app) + ")" : e.what(),
            cmd);
    } catch (const CLI::ParseError& e) {
        return usage(e.what(), current_command(app));
    } catch (const UsageError& e) {
        return usage(e.what, current_command(app));
    }
    return exit_code();
}
