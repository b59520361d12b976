// iwcm::Runtime (include/iwcm/runtime.hpp).
#include "iwcm/runtime.hpp"
