// The progress line. Read first: progress.hpp.
#include "tools/progress.hpp"

#include <unistd.h>

#include <cstdio>

namespace iwcm::tools {

Progress::Progress() : enabled_(isatty(STDERR_FILENO) == 1) {}

bool Progress::due() const {
    return enabled_ && (!ever_ || std::chrono::steady_clock::now() - last_ >= kMinInterval);
}

void Progress::show(const std::string& text) {
    if (!enabled_) return;
    // Spaces over what is left of a longer previous text.
    const std::size_t pad = width_ > text.size() ? width_ - text.size() : 0;
    std::fprintf(stderr, "\r%s%*s", text.c_str(), static_cast<int>(pad), "");
    std::fflush(stderr);
    width_ = text.size();
    drawn_ = true;
    ever_ = true;
    last_ = std::chrono::steady_clock::now();
}

void Progress::clear() {
    if (!enabled_ || !drawn_) return;
    std::fprintf(stderr, "\r%*s\r", static_cast<int>(width_), "");
    std::fflush(stderr);
    width_ = 0;
    drawn_ = false;
}

void Progress::add_options(CLI::App* cmd, int& mode) {
    auto* on = cmd->add_flag_callback(
        "--progress", [&mode] { mode = 1; },
        "a progress line on stderr during long work (default: when stderr is a terminal and "
        "the output is not JSON)");
    auto* off = cmd->add_flag_callback(
        "--no-progress", [&mode] { mode = 0; }, "no progress line");
    on->excludes(off);
    off->excludes(on);
}

bool Progress::wanted(int mode, bool json) {
    if (mode >= 0) return mode == 1;
    return !json && isatty(STDERR_FILENO) == 1;
}

void Progress::finish(const std::string& text) {
    if (!enabled_) return;
    show(text);
    std::fputc('\n', stderr);
    std::fflush(stderr);
    width_ = 0;
    drawn_ = false;
}

}  // namespace iwcm::tools
