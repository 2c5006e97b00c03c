package dev.relock.jedis;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertThrows;

import dev.relock.Transport;
import dev.relock.TransportException;
import java.time.Duration;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;
import redis.clients.jedis.Connection;
import redis.clients.jedis.DefaultJedisClientConfig;
import redis.clients.jedis.DefaultJedisSocketFactory;
import redis.clients.jedis.HostAndPort;
import redis.clients.jedis.exceptions.JedisConnectionException;

/**
 * Found in the Java review (2026-12-02, finding 4): Jedis's {@code sendCommand} reconnects a
 * connection relock cut, on a bare socket without the handshake, so a {@code LOCK.WAIT} of a
 * round already over went out (to database 0, unauthenticated) and its grant was left to
 * expire unowned. A cut dedicated connection sends nothing, whenever the cut lands.
 */
class TransportTest {
    static RedisServer srv;

    @BeforeAll
    static void start() throws Exception {
        srv = new RedisServer();
    }

    @AfterAll
    static void stop() {
        srv.close();
    }

    private static JedisTransport transport() {
        return JedisTransport.server(new HostAndPort("127.0.0.1", srv.port),
            DefaultJedisClientConfig.builder().database(1).build());
    }

    private static void assertNothingRan(String key) {
        String stats = String.valueOf(srv.cmd("INFO", "commandstats"));
        assertFalse(stats.contains("cmdstat_lock.wait"), stats);
        assertEquals(0L, srv.cmd("EXISTS", key));
    }

    @Test
    void aConnectionCutBeforeItsCallSendsNothing() {
        try (JedisTransport t = transport()) {
            Transport.Connection d = t.dedicated("cut-before");
            d.abort();
            TransportException e = assertThrows(TransportException.class,
                () -> d.call(Duration.ofSeconds(2), "LOCK.WAIT", "cut-before", "o", 10_000, 1_000));
            assertFalse(e.sent(), "nothing was written");
            d.close();
            assertNothingRan("cut-before");
        }
    }

    /**
     * The cut lands between the call's setSoTimeout and its write (a window no test can hit on
     * purpose): Jedis's sendCommand then reconnects, and the command ran on the new socket in
     * database 0 (measured with a bare Jedis Connection: SET answered OK there). relock's
     * connections open their socket once.
     */
    @Test
    void aClosedConnectionIsNeverReopenedBySendCommand() throws Exception {
        DefaultJedisClientConfig config = DefaultJedisClientConfig.builder().database(1).build();
        HostAndPort at = new HostAndPort("127.0.0.1", srv.port);
        try (Connection c = new Connection(new JedisTransport.OnceSocketFactory(new DefaultJedisSocketFactory(at, config)), config)) {
            c.sendCommand(JedisTransport.args(new Object[] {"PING"}));
            assertEquals("PONG", String.valueOf(JedisTransport.convert(c.getOne())));
            c.forceDisconnect();
            assertThrows(JedisConnectionException.class,
                () -> c.sendCommand(JedisTransport.args(new Object[] {"LOCK.WAIT", "cut-during", "o", 10_000, 1_000})));
        }
        assertNothingRan("cut-during");
    }
}
