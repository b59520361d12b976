// Text forms of addresses and endpoints. Read first: include/iwcm/address.hpp.
#include "iwcm/address.hpp"

#include <arpa/inet.h>

#include <charconv>
#include <cstdio>

namespace iwcm {

std::optional<MacAddr> MacAddr::parse(std::string_view text) {
    MacAddr mac;
    if (text.size() != 17) return std::nullopt;
    for (std::size_t i = 0; i < 6; ++i) {
        const char* first = text.data() + i * 3;
        if (i < 5 && first[2] != ':') return std::nullopt;
        auto [ptr, ec] = std::from_chars(first, first + 2, mac.bytes[i], 16);
        if (ec != std::errc{} || ptr != first + 2) return std::nullopt;
    }
    return mac;
}

std::string MacAddr::to_string() const {
    char buf[18];
    std::snprintf(buf, sizeof buf, "%02x:%02x:%02x:%02x:%02x:%02x", bytes[0], bytes[1], bytes[2],
                  bytes[3], bytes[4], bytes[5]);
    return buf;
}

std::optional<Ipv4Addr> Ipv4Addr::parse(std::string_view text) {
    if (text.size() >= INET_ADDRSTRLEN) return std::nullopt;
    std::string s(text);
    Ipv4Addr a;
    if (inet_pton(AF_INET, s.c_str(), a.bytes.data()) != 1) return std::nullopt;
    return a;
}

std::string Ipv4Addr::to_string() const {
    char buf[INET_ADDRSTRLEN];
    inet_ntop(AF_INET, bytes.data(), buf, sizeof buf);
    return buf;
}

std::optional<Ipv6Addr> Ipv6Addr::parse(std::string_view text) {
    if (text.size() >= INET6_ADDRSTRLEN) return std::nullopt;
    std::string s(text);
    Ipv6Addr a;
    if (inet_pton(AF_INET6, s.c_str(), a.bytes.data()) != 1) return std::nullopt;
    return a;
}

std::string Ipv6Addr::to_string() const {
    char buf[INET6_ADDRSTRLEN];
    inet_ntop(AF_INET6, bytes.data(), buf, sizeof buf);
    return buf;
}

std::optional<IpAddr> IpAddr::parse(std::string_view text) {
    if (auto v4 = Ipv4Addr::parse(text)) return IpAddr(*v4);
    if (auto v6 = Ipv6Addr::parse(text)) return IpAddr(*v6);
    return std::nullopt;
}

std::string IpAddr::to_string() const {
    return is_v4() ? v4().to_string() : v6().to_string();
}

std::optional<Endpoint> Endpoint::parse(std::string_view text) {
    std::string_view host;
    std::string_view port;
    if (!text.empty() && text.front() == '[') {
        auto close = text.find("]:");
        if (close == std::string_view::npos) return std::nullopt;
        host = text.substr(1, close - 1);
        port = text.substr(close + 2);
        if (!Ipv6Addr::parse(host)) return std::nullopt;
    } else {
        auto colon = text.rfind(':');
        if (colon == std::string_view::npos) return std::nullopt;
        host = text.substr(0, colon);
        port = text.substr(colon + 1);
        if (!Ipv4Addr::parse(host)) return std::nullopt;
    }
    auto addr = IpAddr::parse(host);
    std::uint16_t p = 0;
    auto [ptr, ec] = std::from_chars(port.data(), port.data() + port.size(), p);
    if (!addr || ec != std::errc{} || ptr != port.data() + port.size()) return std::nullopt;
    return Endpoint{*addr, p};
}

std::string Endpoint::to_string() const {
    std::string host = addr.to_string();
    if (addr.is_v6()) host = "[" + host + "]";
    return host + ":" + std::to_string(port);
}

}  // namespace iwcm
