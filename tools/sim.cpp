// iwarp-cm sim: the seeded fault simulation (src/io/sim/sim_runner.hpp) from the
// command line. Runs seeds start..start+N-1, or replays one with --seed (and
// --log to print every event and command), and prints seeds per second.
// On a terminal, a progress line on stderr (tools/progress.hpp).
// Read first: src/io/sim/sim_runner.hpp.
#include <chrono>
#include <cstdio>
#include <memory>

#include "io/sim/sim_runner.hpp"
#include "tools/commands.hpp"
#include "tools/progress.hpp"

namespace iwcm::tools {

namespace {

struct SimOptions {
    std::uint64_t seeds = 1000;
    std::uint64_t start_seed = 1;
    std::uint64_t seed = 0;
    bool replay = false;
    std::size_t conns = 12;
    std::size_t cores = 3;
    double loss = 0.30;
    double shut_window = 0;
    bool no_faults = false;
    bool no_disruptions = false;
    bool log = false;
    bool verbose = false;
    int progress = -1;  // --progress / --no-progress
};

// "sim: 120/1000 seeds, 950 seeds/s, 0 failed".
std::string progress_text(std::uint64_t done, std::uint64_t total, double secs,
                          std::uint64_t failed) {
    char buf[160];
    std::snprintf(buf, sizeof buf, "sim: %llu/%llu seeds, %.0f seeds/s, %llu failed",
                  static_cast<unsigned long long>(done), static_cast<unsigned long long>(total),
                  secs > 0 ? static_cast<double>(done) / secs : 0.0,
                  static_cast<unsigned long long>(failed));
    return buf;
}

int run_sim(const SimOptions& opt) {
    io::install_seed_reporter();
    io::SimScenario sc;
    sc.conns = opt.conns;
    sc.cores = opt.cores;
    sc.max_loss = opt.loss;
    sc.max_shut_window = opt.shut_window;
    sc.faults = !opt.no_faults;
    sc.disruptions = !opt.no_disruptions;
    if (opt.replay) {
        sc.seed = opt.seed;
        sc.log = opt.log;
        io::SimOutcome o = io::run_scenario(sc);
        std::printf("%s\n", io::describe(o).c_str());
        return o.ok ? 0 : 1;
    }
    auto t0 = std::chrono::steady_clock::now();
    std::uint64_t failed = 0, established = 0, attempts = 0, frames = 0, clean = 0;
    Progress progress(Progress::wanted(opt.progress, false));
    const auto elapsed = [&] {
        return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    };
    for (std::uint64_t i = 0; i < opt.seeds; ++i) {
        if (progress.due()) progress.show(progress_text(i, opt.seeds, elapsed(), failed));
        sc.seed = opt.start_seed + i;
        io::SimOutcome o = io::run_scenario(sc);
        attempts += o.attempts;
        established += o.established_both;
        frames += o.frames;
        clean += o.clean;
        if (opt.verbose || !o.ok) {
            progress.clear();
            std::printf("%s\n", io::describe(o).c_str());
            std::fflush(stdout);
        }
        if (!o.ok) {
            ++failed;
            std::printf(
                "  replay: iwarp-cm sim --seed %llu --conns %zu --cores %zu --loss %g --log\n",
                static_cast<unsigned long long>(o.seed), opt.conns, opt.cores, opt.loss);
        }
    }
    double secs = elapsed();
    progress.finish(progress_text(opt.seeds, opt.seeds, secs, failed));
    std::printf(
        "sim: %llu seeds (%llu..%llu, %llu clean), %llu failed; %llu attempts, %llu established on "
        "both "
        "sides, %llu frames; %.2f s, %.0f seeds/s\n",
        static_cast<unsigned long long>(opt.seeds), static_cast<unsigned long long>(opt.start_seed),
        static_cast<unsigned long long>(opt.start_seed + opt.seeds - 1),
        static_cast<unsigned long long>(clean), static_cast<unsigned long long>(failed),
        static_cast<unsigned long long>(attempts), static_cast<unsigned long long>(established),
        static_cast<unsigned long long>(frames), secs,
        secs > 0 ? static_cast<double>(opt.seeds) / secs : 0.0);
    return failed == 0 ? 0 : 1;
}

}  // namespace

void add_sim(CLI::App& app) {
    auto opt = std::make_shared<SimOptions>();
    CLI::App* cmd = app.add_subcommand(
        "sim", "seeded fault simulation: many cores, connections, faults, invariants");
    auto* seeds = cmd->add_option("--seeds", opt->seeds, "how many seeds to run")
                      ->transform(bounded(1, 1e9, true));
    auto* start = cmd->add_option("--start-seed", opt->start_seed, "first seed")
                      ->transform(bounded(0, 1e18, true));
    // One seed replayed, or a run of many: not both.
    auto* seed = cmd->add_option("--seed", opt->seed, "replay this one seed (deterministic)")
                     ->transform(bounded(0, 1e18, true))
                     ->excludes(seeds)
                     ->excludes(start)
                     ->each([opt](const std::string&) { opt->replay = true; });
    cmd->add_option("--conns", opt->conns, "connection attempts per seed (K)")
        ->transform(bounded(1, 10000, true));
    cmd->add_option("--cores", opt->cores, "cores on the segment")->transform(bounded(2, 4, true));
    cmd->add_option("--loss", opt->loss, "highest loss probability of a link")
        ->transform(bounded(0, 0.9, false));
    cmd->add_option("--shut-window", opt->shut_window,
                    "highest probability of a link that a segment arrives with a zero window")
        ->transform(bounded(0, 0.9, false));
    cmd->add_flag("--no-faults", opt->no_faults, "no loss, duplication, reordering or corruption");
    cmd->add_flag("--no-disruptions", opt->no_disruptions, "no destroy_listen or address down");
    cmd->add_flag("--log", opt->log, "with --seed: print every event and command")->needs(seed);
    cmd->add_flag("-v,--verbose", opt->verbose, "one line per seed");
    Progress::add_options(cmd, opt->progress);
    cmd->footer(help_footer("iwarp-cm sim --seeds 200 --conns 12 --loss 0.3"));
    cmd->callback([opt] { set_exit_code(run_sim(*opt)); });
}

}  // namespace iwcm::tools
