// What every subcommand shares: the exit-code table, help footers, number
// checks. Read first: tools/commands.hpp, docs/cli.md.
#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <optional>
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

// Decimal digits with an optional fraction and exponent ("1e6", "2.5e3"),
// a '-' first only where `allow_sign`: what strtod may then read, without
// its hex, "inf", "nan", leading blanks or '+'.
bool decimal_text(const std::string& s, bool allow_sign) {
    std::size_t i = allow_sign && !s.empty() && s[0] == '-' ? 1 : 0;
    if (i >= s.size() || s[i] < '0' || s[i] > '9') return false;
    for (; i < s.size(); ++i) {
        const char c = s[i];
        const bool sign_of_exponent =
            (c == '-' || c == '+') && (s[i - 1] == 'e' || s[i - 1] == 'E');
        if (!(c >= '0' && c <= '9') && c != '.' && c != 'e' && c != 'E' && !sign_of_exponent)
            return false;
    }
    return true;
}

// The digits of a whole number written as decimal_text ("1e6", "2.5e3",
// "1000e-3"), exactly (a seed of 18 digits stays itself), or nothing when it
// has a fraction. `s` passed decimal_text and strtod read it as finite.
std::optional<std::string> whole_digits(const std::string& s) {
    const bool neg = s[0] == '-';
    const std::size_t e_at = std::min(s.find_first_of("eE"), s.size());
    const std::string mant = s.substr(neg ? 1 : 0, e_at - (neg ? 1 : 0));
    long long exp = 0;
    if (e_at < s.size()) {
        errno = 0;
        exp = std::strtoll(s.c_str() + e_at + 1, nullptr, 10);
        if (errno == ERANGE || exp > 400 || exp < -400) return std::nullopt;
    }
    const std::size_t dot = mant.find('.');
    std::string digits = mant;
    if (dot != std::string::npos) {
        if (mant.find('.', dot + 1) != std::string::npos) return std::nullopt;
        digits.erase(dot, 1);
        exp -= static_cast<long long>(mant.size() - dot - 1);
    }
    if (digits.find_first_not_of('0') == std::string::npos) return "0";
    if (exp >= 0) {
        digits.append(static_cast<std::size_t>(exp), '0');
    } else {
        const auto cut = static_cast<std::size_t>(-exp);
        if (cut > digits.size()) return std::nullopt;
        if (digits.find_first_not_of('0', digits.size() - cut) != std::string::npos)
            return std::nullopt;
        digits.resize(digits.size() - cut);
    }
    digits.erase(0, std::min(digits.find_first_not_of('0'), digits.size() - 1));
    return (neg && digits != "0" ? "-" : "") + digits;
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
            if (integer && !decimal_text(in, lo < 0)) return bad;
            if (!integer && (in.empty() || (lo >= 0 && in[0] == '-'))) return bad;
            char* end = nullptr;
            errno = 0;
            const double v = std::strtod(in.c_str(), &end);
            if (end != in.c_str() + in.size() || errno == ERANGE || !std::isfinite(v) || v < lo ||
                v > hi)
                return bad;
            // A whole number in the notation the limits are printed in ("1e6")
            // goes on to CLI11's integer conversion as plain digits.
            if (integer) {
                const auto digits = whole_digits(in);
                if (!digits) return bad;
                in = *digits;
            }
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
