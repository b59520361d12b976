// iwarp-cm run -- PROGRAM: an unmodified RDMA program over iwarp-cm's
// librdmacm and libibverbs (docs/applications.md).
// Read first: include/iwcm/runtime.hpp (RuntimeConfig::from_env reads what
// this sets), tools/wire_cli.hpp (the interface options and their checks).
//
// The options are checked as `listen` and `connect` check them, before the
// program starts; then the IWCM_* variables carry them to the runtime inside
// the program, LD_PRELOAD puts libiwcm_rdma.so before Debian's librdmacm and
// libibverbs, and the program runs as our child (fork + execvp, so that a
// failed exec is ours to report). Its exit status becomes ours, as a shell
// reports it: 128 + N for a program killed by signal N.
//
// Signals. SIGINT, SIGTERM and SIGHUP sent to `run` (kill(2): si_code
// SI_USER and the like) go on to the program. Those the kernel sends to the
// whole foreground process group (Ctrl-C at the terminal, a hang-up) reach
// the program by themselves and are not sent twice. The program dies with
// `run` if `run` is killed with SIGKILL (PR_SET_PDEATHSIG), so no program
// outlives its wrapper.
#include <fcntl.h>
#include <net/if.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <climits>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "iwcm/assert.hpp"
#include "tools/commands.hpp"
#include "tools/wire_cli.hpp"

#ifndef IWCM_LIBDIR_FROM_BINDIR
#error "IWCM_LIBDIR_FROM_BINDIR is set by tools/CMakeLists.txt (the installed library's directory)"
#endif

namespace iwcm::tools {

namespace {

constexpr const char* kLibraryName = "libiwcm_rdma.so";
// What execvp's failure means, as a shell says it (POSIX "Command Search and
// Execution"): not found, or found but not executable.
constexpr int kNotFound = 127;
constexpr int kNotExecutable = 126;

// Every variable RuntimeConfig::from_env reads.
constexpr std::array<const char*, 15> kRuntimeVariables = {
    "IWCM_TAP",      "IWCM_IP",     "IWCM_MAC",    "IWCM_GATEWAY",   "IWCM_VLAN",
    "IWCM_DEV",      "IWCM_SWITCH", "IWCM_CRC",    "IWCM_TOS",       "IWCM_MPA_REV",
    "IWCM_XDP_MODE", "IWCM_PCAP",   "IWCM_SETTLE", "IWCM_BUSY_POLL", "IWCM_TAP_OFFLOAD"};

constexpr std::array<int, 3> kForwarded = {SIGINT, SIGTERM, SIGHUP};

// PROGRAM [ARGS...] as split_run_command found them.
std::vector<std::string>& program_words() {
    static std::vector<std::string> words;
    return words;
}

struct RunOptions {
    WireOptions wire;
    std::uint32_t settle_ms = 0;       // --settle
    std::uint32_t busy_poll_us = 0;    // --busy-poll
    std::vector<std::string> command;  // PROGRAM [ARGS...]
};

// A failure of `run` itself (not a usage error): one line, the exit code.
struct SetupError {
    std::string what;
    int code = exit_codes::kSetup;
};

std::string error_text(int err) {
    return std::strerror(err);
}

// Why `path` cannot be preloaded (a missing or unreadable file, not a
// file), or an empty string.
std::string unreadable(const std::string& path) {
    struct stat st {};
    if (::stat(path.c_str(), &st) != 0) return error_text(errno);
    if (!S_ISREG(st.st_mode)) return "not a regular file";
    if (::access(path.c_str(), R_OK) != 0) return error_text(errno);
    return {};
}

// This executable (/proc/self/exe, links resolved).
std::string exe_path() {
    std::array<char, PATH_MAX> buf{};
    const ssize_t n = ::readlink("/proc/self/exe", buf.data(), buf.size() - 1);
    if (n <= 0) throw SetupError{"/proc/self/exe: " + error_text(errno)};
    std::string path(buf.data(), static_cast<std::size_t>(n));
    IWCM_ASSERT(path.find('/') != std::string::npos);
    return path;
}

std::string exe_dir() {
    const std::string path = exe_path();
    return path.substr(0, path.rfind('/'));
}

// `path` from the root, "." and ".." taken out by their names (links stay
// as they are: the library keeps the name it was found by).
std::string absolute(const std::string& path) {
    std::error_code ec;
    const auto abs = std::filesystem::absolute(path, ec);
    if (ec) throw SetupError{path + ": " + ec.message()};
    return abs.lexically_normal().string();
}

// The library to preload: $IWCM_LIBRARY, else the one beside this program
// (<bin>/../lib in the build tree, the install's libdir once installed).
std::string find_library() {
    if (const char* env = std::getenv("IWCM_LIBRARY"); env != nullptr && *env != '\0') {
        if (const std::string why = unreadable(env); !why.empty())
            throw SetupError{"IWCM_LIBRARY=" + std::string(env) + ": " + why};
        return absolute(env);
    }
    const std::string dir = exe_dir();
    const std::string libdir = IWCM_LIBDIR_FROM_BINDIR;
    std::vector<std::string> tried = {dir + "/../lib/" + kLibraryName};
    if (libdir != "../lib") tried.push_back(dir + "/" + libdir + "/" + kLibraryName);
    for (const std::string& path : tried)
        if (unreadable(path).empty()) return absolute(path);
    std::string where;
    for (const std::string& path : tried) where += (where.empty() ? "" : " nor ") + path;
    throw SetupError{std::string(kLibraryName) + " not found: no " + where +
                     " (build the iwcm_rdma target, or set IWCM_LIBRARY)"};
}

// The checks of listen and connect (tools/wire_cli.cpp), with one
// difference: a --dev interface that does not exist is a setup error.
void check_options(const RunOptions& o, const CLI::App& cmd) {
    if (!o.wire.dev.empty()) {
#ifndef IWCM_WITH_XDP
        throw SetupError{"--dev " + o.wire.dev +
                         ": shared-address mode was not built (needs libxdp-dev, libbpf-dev, "
                         "clang)"};
#endif
        if (::if_nametoindex(o.wire.dev.c_str()) == 0)  // as `iwarp-cm switch` says it
            throw SetupError{"--dev " + o.wire.dev + ": " +
                             (errno == ENODEV ? "no such interface" : error_text(errno))};
    }
    if (auto iface = parse_interface(o.wire); !iface) throw UsageError{iface.error()};
    if (cmd.count("--pcap") != 0) {
        const int fd = ::open(o.wire.pcap.c_str(), O_WRONLY | O_CREAT | O_CLOEXEC, 0644);
        if (fd < 0) throw UsageError{"--pcap " + o.wire.pcap + ": " + error_text(errno)};
        ::close(fd);
    }
    IWCM_ASSERT(!o.command.empty());
}

void set(const char* name, const std::string& value) {
    if (::setenv(name, value.c_str(), 1) != 0)
        throw SetupError{std::string("setenv ") + name + ": " + error_text(errno)};
}

// The variables of the options given; the others are removed, so that the
// runtime's defaults apply whatever our own environment held.
void set_environment(const RunOptions& o, const CLI::App& cmd, const std::string& library) {
    for (const char* name : kRuntimeVariables) ::unsetenv(name);
    const WireOptions& w = o.wire;
    const auto given = [&cmd](const char* option) { return cmd.count(option) != 0; };
    if (!w.tap.empty()) set("IWCM_TAP", w.tap);
    if (!w.dev.empty()) {
        set("IWCM_DEV", w.dev);
        // Programs share the interface through its switch, which the first
        // of them starts as `iwarp-cm switch` (src/io/shared/switch.hpp).
        set("IWCM_SWITCH", exe_path());
    }
    if (given("--ip")) set("IWCM_IP", w.ip);
    if (given("--mac")) set("IWCM_MAC", w.mac);
    if (given("--gateway")) set("IWCM_GATEWAY", w.gateway);
    if (w.vlan >= 0) set("IWCM_VLAN", std::to_string(w.vlan));  // -1: none, the default
    if (given("--xdp-mode")) set("IWCM_XDP_MODE", w.xdp_mode);
    if (w.crc) set("IWCM_CRC", "1");
    if (given("--tos")) set("IWCM_TOS", std::to_string(w.tos));
    if (given("--mpa-rev")) set("IWCM_MPA_REV", std::to_string(w.mpa_rev));
    if (given("--pcap")) set("IWCM_PCAP", absolute(w.pcap));
    if (given("--settle")) set("IWCM_SETTLE", std::to_string(o.settle_ms));
    if (given("--busy-poll")) set("IWCM_BUSY_POLL", std::to_string(o.busy_poll_us));
    if (w.no_tap_offload) set("IWCM_TAP_OFFLOAD", "0");
    // ld.so splits LD_PRELOAD at spaces and colons (ld.so(8)).
    if (library.find_first_of(" :") != std::string::npos)
        throw SetupError{library + ": a path with a space or a colon cannot be preloaded"};
    const char* before = std::getenv("LD_PRELOAD");
    std::string preload = before != nullptr && *before != '\0' ? library + ":" + before : library;
#ifdef IWCM_PRELOAD_FIRST
    preload = std::string(IWCM_PRELOAD_FIRST) + ":" + preload;  // the sanitizer build's runtime
#endif
    set("LD_PRELOAD", preload);
}

// ---------------------------------------------------------------- the child

volatile sig_atomic_t g_child = 0;

void forward_signal(int signo, siginfo_t* info, void*) {
    const pid_t child = g_child;
    if (child > 0 && info->si_code != SI_KERNEL) ::kill(child, signo);
}

// Our handlers for the forwarded signals (those not ignored when we started:
// an ignored signal stays ignored, in us and in the program), with the old
// dispositions to give back to the child.
struct Signals {
    std::array<struct sigaction, kForwarded.size()> old{};
    sigset_t blocked{};
    sigset_t old_mask{};

    void install() {
        sigemptyset(&blocked);
        for (int s : kForwarded) sigaddset(&blocked, s);
        IWCM_ASSERT(::sigprocmask(SIG_BLOCK, &blocked, &old_mask) == 0);
        for (std::size_t i = 0; i < kForwarded.size(); ++i) {
            IWCM_ASSERT(::sigaction(kForwarded[i], nullptr, &old[i]) == 0);
            if (old[i].sa_handler == SIG_IGN) continue;
            struct sigaction sa {};
            sa.sa_sigaction = forward_signal;
            sa.sa_flags = SA_SIGINFO | SA_RESTART;
            sigemptyset(&sa.sa_mask);
            IWCM_ASSERT(::sigaction(kForwarded[i], &sa, nullptr) == 0);
        }
    }
    // In the child, before exec: what we inherited, unblocked.
    void restore() const {
        for (std::size_t i = 0; i < kForwarded.size(); ++i)
            ::sigaction(kForwarded[i], &old[i], nullptr);
        ::sigprocmask(SIG_SETMASK, &old_mask, nullptr);
    }
    void unblock() const { IWCM_ASSERT(::sigprocmask(SIG_SETMASK, &old_mask, nullptr) == 0); }
};

// The child's side: die with the parent, signals as inherited, exec; on
// failure the errno goes up the pipe (closed by a successful exec).
[[noreturn]] void exec_child(const Signals& sig, pid_t parent, int report_fd,
                             const std::vector<char*>& argv) {
    ::prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (::getppid() != parent) ::_exit(exit_codes::kSetup);  // `run` is gone already
    sig.restore();
    ::execvp(argv[0], argv.data());
    const int err = errno;
    [[maybe_unused]] const ssize_t n = ::write(report_fd, &err, sizeof err);
    ::_exit(err == ENOENT ? kNotFound : kNotExecutable);
}

// The errno of a failed exec, or 0 once the exec succeeded (EOF).
int read_exec_error(int fd) {
    int err = 0;
    ssize_t n;
    do {
        n = ::read(fd, &err, sizeof err);
    } while (n < 0 && errno == EINTR);
    return n == static_cast<ssize_t>(sizeof err) ? err : 0;
}

int wait_child(pid_t child) {
    int status = 0;
    pid_t got;
    do {
        got = ::waitpid(child, &status, 0);
    } while (got < 0 && errno == EINTR);
    IWCM_ASSERT(got == child);
    if (WIFEXITED(status)) return WEXITSTATUS(status);
    IWCM_ASSERT(WIFSIGNALED(status));
    return 128 + WTERMSIG(status);
}

int run_program(const std::vector<std::string>& program) {
    std::vector<char*> argv;
    for (const std::string& a : program) argv.push_back(const_cast<char*>(a.c_str()));
    argv.push_back(nullptr);
    std::array<int, 2> report{};
    if (::pipe2(report.data(), O_CLOEXEC) != 0) throw SetupError{"pipe: " + error_text(errno)};
    Signals sig;
    sig.install();
    const pid_t parent = ::getpid();
    const pid_t child = ::fork();
    if (child < 0) {
        const int err = errno;
        sig.unblock();
        throw SetupError{"fork: " + error_text(err)};
    }
    if (child == 0) exec_child(sig, parent, report[1], argv);
    ::close(report[1]);
    g_child = child;
    sig.unblock();  // signals that came meanwhile now reach the child
    const int exec_error = read_exec_error(report[0]);
    ::close(report[0]);
    const int code = wait_child(child);
    g_child = 0;  // reaped: its process ID may be another's from now on
    if (exec_error != 0)
        throw SetupError{program[0] + ": " + error_text(exec_error),
                         exec_error == ENOENT ? kNotFound : kNotExecutable};
    return code;
}

int run(const RunOptions& o, const CLI::App& cmd) {
    try {
        check_options(o, cmd);
        set_environment(o, cmd, find_library());
        std::fflush(stdout);
        return run_program(o.command);
    } catch (const SetupError& e) {
        std::fprintf(stderr, "iwarp-cm run: %s\n", e.what.c_str());
        return e.code;
    }
}

std::string run_footer() {
    return "Example:\n"
           "  iwarp-cm run --tap iwcm-a --ip 10.99.0.1/24 -- rping -s -a 10.99.0.1 -C 10 -v\n"
           "\n"
           "Environment: IWCM_LIBRARY, the library to preload (default: libiwcm_rdma.so\n"
           "beside this program). The program gets IWCM_TAP, IWCM_IP, IWCM_MAC,\n"
           "IWCM_GATEWAY, IWCM_VLAN, IWCM_DEV, IWCM_XDP_MODE, IWCM_CRC, IWCM_TOS,\n"
           "IWCM_MPA_REV, IWCM_PCAP, IWCM_SETTLE, IWCM_TAP_OFFLOAD from the options\n"
           "given (the others removed), with --dev IWCM_SWITCH (this program, which runs\n"
           "the interface's switch for every program on it), and LD_PRELOAD with the\n"
           "library first.\n"
           "\n"
           "Exit codes: the program's own exit status, or\n"
           "    1  setup failed (the library or the --dev interface is missing)\n"
           "    2  usage error: bad or missing arguments (one line on stderr)\n"
           "  126  PROGRAM is not executable\n"
           "  127  PROGRAM was not found\n"
           "  128+N  the program was killed by signal N (130: SIGINT, 143: SIGTERM)\n";
}

}  // namespace

void add_run(CLI::App& app) {
    auto opt = std::make_shared<RunOptions>();
    CLI::App* cmd = app.add_subcommand(
        "run",
        "run an RDMA program (librdmacm, libibverbs) over iwarp-cm, unmodified: "
        "iwarp-cm run [OPTIONS] [--] PROGRAM [ARGS...]. PROGRAM is found in PATH as a shell "
        "finds it; its arguments start after -- or at the first word that is not an option of "
        "run, and are the program's own");
    add_interface_options(cmd, opt->wire);
    cmd->add_option("--mpa-rev", opt->wire.mpa_rev,
                    "MPA revision: connections send this revision; a listener rejects requests "
                    "above it")
        ->check(CLI::IsMember({1, 2}));
    cmd->add_flag("--crc", opt->wire.crc, "ask for CRC32c on FPDUs (MPA C flag)");
    cmd->add_option("--pcap", opt->wire.pcap, "write every frame in and out to this pcap file");
    cmd->add_option("--settle", opt->settle_ms,
                    "milliseconds a server may need to be ready: our first data as a client "
                    "waits after ESTABLISHED, or until the server's first byte, and a refused "
                    "connect is tried again within it (for soft-iWARP servers; 0 by default)")
        ->transform(bounded(0, 60000, true));
    cmd->add_option("--busy-poll", opt->busy_poll_us,
                    "busy polling, microseconds (0: off, the default): the progress thread "
                    "never sleeps, and over --dev the AF_XDP socket prefers busy polling with "
                    "this time per system call; needs a core per busy thread "
                    "(docs/applications.md)")
        ->transform(bounded(0, 1000000, true));
    cmd->footer(run_footer());
    cmd->callback([opt, cmd] {
        opt->command = program_words();
        if (opt->command.empty())
            throw UsageError{"no program to run: iwarp-cm run [OPTIONS] -- PROGRAM [ARGS...]"};
        set_exit_code(run(*opt, *cmd));
    });
}

int split_run_command(CLI::App& app, int argc, char** argv) {
    IWCM_ASSERT(argc >= 2 && std::string(argv[1]) == "run");
    CLI::App* cmd = app.get_subcommand("run");
    int i = 2;
    while (i < argc) {
        const std::string arg = argv[i];
        if (arg == "--") {
            program_words().assign(argv + i + 1, argv + argc);
            return i;
        }
        if (arg.size() < 2 || arg[0] != '-') break;  // the program's first word
        // One of ours (or a word CLI11 will refuse): skip its value too,
        // unless it is a flag or written as --name=value.
        const CLI::Option* o = cmd->get_option_no_throw(arg.substr(0, arg.find('=')));
        const bool takes_value = o != nullptr && o->get_items_expected_max() != 0;
        i += takes_value && arg.find('=') == std::string::npos ? 2 : 1;
    }
    program_words().assign(argv + std::min(i, argc), argv + argc);
    return std::min(i, argc);
}

bool run_paths(std::string& self, std::string& library, std::string& error) {
    try {
        self = exe_path();
        library = find_library();
        return true;
    } catch (const SetupError& e) {
        error = e.what;
        return false;
    }
}

}  // namespace iwcm::tools
