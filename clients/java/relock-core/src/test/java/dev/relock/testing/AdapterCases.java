package dev.relock.testing;

import dev.relock.Relock;
import java.util.List;

/**
 * A case class run by every adapter: the adapter's test module subclasses it once per class of
 * cases and names its {@link Adapter}.
 */
public abstract class AdapterCases<S extends RedisServer> {
    /** What a case needs from an adapter: its test server type and clients made through it. */
    public interface Adapter<S extends RedisServer> {
        /** A new redis-server with the module. */
        S server() throws Exception;

        /** A client of one server through the adapter, with settings. */
        Relock open(S server, Relock.Settings settings);

        /** A Redlock client over independent masters through the adapter (default settings). */
        Relock redlock(List<S> masters);
    }

    protected abstract Adapter<S> adapter();

    protected final S server() throws Exception {
        return adapter().server();
    }

    protected final Relock open(S server, Relock.Settings settings) {
        return adapter().open(server, settings);
    }

    protected final Relock redlock(List<S> masters) {
        return adapter().redlock(masters);
    }
}
