// A progress line on stderr for long work (`iwarp-cm sim`, `bench`, `rping`,
// `connect`, `listen`).
// Read first: docs/cli.md.
//
// Shown by default only when stderr is a terminal (and the command prints
// no JSON): redrawn in place with '\r', at most ten times a second, ended
// with a newline or erased. --progress and --no-progress choose. The clock
// is the tool's real clock (steady_clock); the core never sees it.
#pragma once

#include <CLI/CLI.hpp>
#include <chrono>
#include <cstddef>
#include <string>

namespace iwcm::tools {

class Progress {
public:
    // Enabled when stderr is a terminal.
    Progress();
    explicit Progress(bool enabled) : enabled_(enabled) {}

    bool enabled() const { return enabled_; }
    // True when a redraw is allowed now: enabled, and the first draw or
    // kMinInterval after the last one.
    bool due() const;
    // Redraws the line with text (whether or not it is due).
    void show(const std::string& text);
    // Erases the line, before other output on the terminal; the next show
    // draws it again.
    void clear();
    // Draws text a last time and ends the line.
    void finish(const std::string& text);

    static constexpr auto kMinInterval = std::chrono::milliseconds(100);

    // --progress and --no-progress on `cmd` (excluding each other): `mode`
    // becomes 1 or 0; it stays -1 when neither is given.
    static void add_options(CLI::App* cmd, int& mode);
    // Whether to draw: as `mode` says, or when neither option was given,
    // when stderr is a terminal and the command's output is not JSON.
    static bool wanted(int mode, bool json);

private:
    bool enabled_ = false;
    bool drawn_ = false;     // something has been drawn since the last clear
    bool ever_ = false;      // something has been drawn at all
    std::size_t width_ = 0;  // columns of the text now on the line
    std::chrono::steady_clock::time_point last_{};
};

}  // namespace iwcm::tools
