// Prints every state transition the engine tests exercised, once, at the end.
#include <cstdio>

#include "cm/dut.hpp"

namespace iwcm::test {

std::set<std::pair<CmState, CmState>>& seen_transitions() {
    static std::set<std::pair<CmState, CmState>> s;
    return s;
}

namespace {

class TransitionReport : public ::testing::Environment {
public:
    void TearDown() override {
        if (std::getenv("IWCM_PRINT_TRANSITIONS") == nullptr) return;
        std::printf("state transitions exercised (%zu):\n", seen_transitions().size());
        for (auto& [from, to] : seen_transitions())
            std::printf("  %s => %s\n", std::string(to_string(from)).c_str(),
                        std::string(to_string(to)).c_str());
    }
};

const auto* const kReport = ::testing::AddGlobalTestEnvironment(new TransitionReport);

}  // namespace
}  // namespace iwcm::test
