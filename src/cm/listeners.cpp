// The listener table and SYN-cookie keys. Read first: src/cm/listeners.hpp.
#include "cm/listeners.hpp"

#include <algorithm>

namespace iwcm::cm {

ListenHandle Listeners::add(Instant now, const Endpoint& local, std::uint16_t vlan,
                            std::uint8_t tos, std::uint32_t backlog, std::uint32_t silent_limit) {
    IWCM_ASSERT(local.port != 0 && silent_limit >= 1 && !serves(local, vlan));
    // The endpoint is served again: the grace of a slot it had ends. A slot still in
    // its grace is kept for it (its endpoint's SYNs wait for a listener).
    for (Listener& o : slots_)
        if (!o.in_use && o.local == local && o.vlan == vlan) o.grace_until.reset();
    std::size_t i = 0;
    while (i < slots_.size() &&
           (slots_[i].in_use || (slots_[i].grace_until && *slots_[i].grace_until > now)))
        ++i;
    if (i == slots_.size()) slots_.emplace_back();
    Listener& l = slots_[i];
    IWCM_ASSERT(l.pending == 0 && l.silent_order.empty());
    l.in_use = true;
    l.grace_until.reset();
    l.local = local;
    l.vlan = vlan;
    l.tos = tos;
    l.backlog = backlog;
    l.silent_limit = silent_limit;
    l.pending = 0;
    l.half_open = 0;
    l.silent = 0;
    l.silent_front = 0;
    l.last_cookie.reset();
    return handle_of(l);
}

void Listeners::remove(ListenHandle h, std::optional<Instant> grace_until) {
    Listener* l = find(h);
    IWCM_ASSERT(l != nullptr);
    // Its connections ended first (Core::Impl::destroy_listen), each taking itself off the
    // counts while its listener was still found.
    IWCM_ASSERT(l->pending == 0 && l->silent_order.empty());
    l->in_use = false;
    ++l->generation;
    l->grace_until = grace_until;
}

bool Listeners::in_grace(Instant now, const Endpoint& local, std::uint16_t vlan) const {
    return std::any_of(slots_.begin(), slots_.end(), [&](const Listener& l) {
        return !l.in_use && l.grace_until && *l.grace_until > now &&
               covers(l, local, vlan) != Covers::kNo;
    });
}

void Listeners::check() const {
    for (const Listener& l : slots_) {
        // Generations start at 1 and only grow: a handle of generation 0 is never live.
        IWCM_ASSERT(l.generation != 0);
        // Only a free slot has a grace; a free slot counts no connection.
        IWCM_ASSERT(!l.in_use || !l.grace_until);
        IWCM_ASSERT(l.in_use || (l.pending == 0 && l.silent_order.empty()));
        // Half-open and silent ones are among the pending ones, the silent ones within their
        // limit, each with its handle in the order past silent_front; no silent one, no order.
        IWCM_ASSERT(std::uint64_t{l.half_open} + l.silent <= l.pending);
        IWCM_ASSERT(!l.in_use || (l.silent_limit >= 1 && l.silent <= l.silent_limit));
        IWCM_ASSERT(l.silent_front <= l.silent_order.size());
        IWCM_ASSERT(l.silent_order.size() - l.silent_front >= l.silent);
        IWCM_ASSERT(l.silent != 0 || (l.silent_order.empty() && l.silent_front == 0));
    }
    for (std::size_t i = 0; i < cookie_periods_.size(); ++i)
        IWCM_ASSERT(!cookie_periods_[i] || (*cookie_periods_[i] & 1) == i);
}

}  // namespace iwcm::cm
