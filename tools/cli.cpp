// What every subcommand shares: the exit-code table, help footers, number
// checks. Read first: tools/commands.hpp, README.md "Command line".
#include <cerrno>
#include <charconv>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "iwcm/assert.hpp"
#include "tools/commands.hpp"

namespace iwcm::tools {

int interrupted_code(int signo) {
    return signo == SIGTERM ? exit_codes::kSigterm : exit_codes::kSigint;
}

std::string exit_code_table() {
    return "Exit codes:\n"
           "    0  success\n"
           "    1  setup failed (TAP device, capture file); demo, sim, bench: the run failed\n"
           "    2  usage error: bad or missing arguments (one line on stderr)\n"
           "    3  reset by the peer (\"connection refused (reset by peer)\" included)\n"
           "    4  rejected by the peer (MPA reject)\n"
           "    5  timed out (no answer)\n"
           "    6  any other failure of listen, connect or rping\n"
           "    7  the peer's address did not resolve (no ARP / ND answer)\n"
           "  130  interrupted by SIGINT, 143 by SIGTERM (open connections closed first)\n";
}

std::string help_footer(const std::string& example) {
    std::string s;
    if (!example.empty()) s += "Example:\n  " + example + "\n\n";
    return s + exit_code_table();
}

namespace {

bool whole_number(const std::string& s, bool allow_sign) {
    std::size_t i = 0;
    if (allow_sign && !s.empty() && s[0] == '-') i = 1;
    if (i >= s.size()) return false;
    for (; i < s.size(); ++i)
        if (s[i] < '0' || s[i] > '9') return false;
    return true;
}

std::string limit(double v) {
    char buf[32];
    std::snprintf(buf, sizeof buf, "%g", v);
    return buf;
}

}  // namespace

CLI::Validator bounded(double lo, double hi, bool integer) {
    IWCM_ASSERT(lo <= hi);
    IWCM_ASSERT(std::isfinite(lo) && std::isfinite(hi));
    const std::string range = "[" + limit(lo) + " - " + limit(hi) + "]";
    const std::string desc = std::string(integer ? "INT" : "NUMBER") + " in " + range;
    return CLI::Validator(
        [lo, hi, integer, range](std::string& in) -> std::string {
            const std::string bad =
                "'" + in + "' is not " + (integer ? "a whole number" : "a number") + " in " + range;
            if (integer && !whole_number(in, lo < 0)) return bad;
            if (!integer && (in.empty() || (lo >= 0 && in[0] == '-'))) return bad;
            char* end = nullptr;
            errno = 0;
            const double v = std::strtod(in.c_str(), &end);
            if (end != in.c_str() + in.size() || errno == ERANGE || !std::isfinite(v) || v < lo ||
                v > hi)
                return bad;
            return {};
        },
        desc);
}

CLI::Validator byte_value() {
    return CLI::Validator(
        [](std::string& in) -> std::string {
            const std::string bad = "'" + in + "' is not a byte in [0 - 255] (decimal or 0x hex)";
            const bool hex = in.size() > 2 && in[0] == '0' && (in[1] == 'x' || in[1] == 'X');
            const std::string digits = hex ? in.substr(2) : in;
            const char* first = digits.data();
            const char* last = first + digits.size();
            unsigned v = 0;
            const auto [end, ec] = std::from_chars(first, last, v, hex ? 16 : 10);
            if (digits.empty() || ec != std::errc{} || end != last || v > 255) return bad;
            in = std::to_string(v);
            return {};
        },
        "INT in [0 - 255], decimal or 0x hex");
}

}  // namespace iwcm::tools
