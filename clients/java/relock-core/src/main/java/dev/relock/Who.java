package dev.relock;

import java.util.ArrayList;
import java.util.List;

/** Who ended a hold, as LOCK.HISTORY's client-info shows it (null fields: not given). */
public record Who(Long client, String name, String user, String addr, String command) {
    @Override
    public String toString() {
        List<String> parts = new ArrayList<>();
        if (name != null) {
            parts.add("name " + name);
        }
        if (user != null) {
            parts.add("user " + user);
        }
        if (addr != null) {
            parts.add("addr " + addr);
        }
        String who = client == null ? "a client" : "client " + client;
        return parts.isEmpty() ? who : who + " (" + String.join(", ", parts) + ")";
    }
}
