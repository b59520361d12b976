// The iwarp-cm subcommands and what they share: exit codes, usage errors,
// number validators, help footers. Read first: docs/cli.md.
#pragma once

#include <CLI/CLI.hpp>
#include <span>
#include <string>

namespace iwcm::tools {

// Exit codes of every subcommand (docs/cli.md; printed at the end
// of every --help by exit_code_table()).
namespace exit_codes {
constexpr int kOk = 0;
constexpr int kSetup = 1;       // the device, capture file or address could not be set up
constexpr int kUsage = 2;       // bad or missing arguments (the parser's or our own checks)
constexpr int kReset = 3;       // reset by the peer (a refused connection included)
constexpr int kRejected = 4;    // the peer answered with an MPA reject
constexpr int kTimeout = 5;     // no answer in time
constexpr int kError = 6;       // any other failure (demo, sim and bench: a failed check)
constexpr int kResolution = 7;  // no ARP / ND answer for the peer
constexpr int kSigint = 130;    // interrupted by SIGINT (128 + 2)
constexpr int kSigterm = 143;   // interrupted by SIGTERM (128 + 15)
}  // namespace exit_codes

// The exit code for "interrupted by signal `signo`".
int interrupted_code(int signo);

// A usage error found by our own checks: main() prints "iwarp-cm: <what>"
// on stderr and exits with exit_codes::kUsage.
struct UsageError {
    std::string what;
};

// The text that ends every --help: the subcommand's example (if any) and the
// exit-code table.
std::string help_footer(const std::string& example);
std::string exit_code_table();

// A number option's check: a finite value in [lo, hi]; rejects NaN, infinity,
// a sign on an unsigned range, and text that is not a whole number when
// `integer` is set. A whole number may be written as the limits are printed
// ("1e6", "2.5e3"): it is rewritten as plain digits, so the option takes it
// with ->transform(bounded(...)) (->check would drop the rewrite). Its
// description shows the limits in --help.
CLI::Validator bounded(double lo, double hi, bool integer);
// A byte option's check (e.g. --tos): 0 to 255, decimal or 0x hex; a hex
// value is rewritten in decimal for the option's integer parse.
CLI::Validator byte_value();

void add_demo(CLI::App& app);
void add_bench(CLI::App& app);  // tools/bench.cpp
void add_sim(CLI::App& app);    // tools/sim.cpp
void add_listen(CLI::App& app);
void add_connect(CLI::App& app);  // tools/listen.cpp, tools/connect.cpp
void add_rping(CLI::App& app);    // tools/rping_cli.cpp
void add_run(CLI::App& app);      // tools/run.cpp
// `iwarp-cm run OPTIONS [--] PROGRAM [ARGS...]` (argv[1] is "run"): keeps
// PROGRAM [ARGS...] for run and returns how many words of argv CLI11 is to
// parse, so that the program's options stay its own.
int split_run_command(CLI::App& app, int argc, char** argv);
// This program's path and the library `run` preloads (tools/run.cpp), for `bench
// --wire`; false with `error` set when either is not found.
bool run_paths(std::string& self, std::string& library, std::string& error);
void add_switch(CLI::App& app);  // tools/switch.cpp
// The process exit code chosen by the subcommand that ran.
int exit_code();
void set_exit_code(int code);

// One line describing a frame: TCP flags, sequence numbers, and the MPA
// frame, RTR or TERMINATE it carries (for ladder diagrams and traces).
std::string describe_frame(std::span<const std::byte> frame);

}  // namespace iwcm::tools
