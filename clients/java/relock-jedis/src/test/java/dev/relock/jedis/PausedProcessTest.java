package dev.relock.jedis;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import dev.relock.Hold;
import dev.relock.LockLostException;
import dev.relock.LockOptions;
import dev.relock.Relock;
import dev.relock.RelockException;
import java.io.BufferedReader;
import java.io.File;
import java.io.InputStreamReader;
import java.io.OutputStream;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.TimeUnit;
import org.junit.jupiter.api.Test;
import redis.clients.jedis.HostAndPort;

/**
 * A whole process stopped for longer than its ttl (a long GC pause, SIGSTOP, a VM stall): when
 * it runs again, its hold already says lost (from its own clock, before any renewal could ask
 * the server) and its fenced write is refused, while the process that took the lock meanwhile
 * keeps it. The holder is a JVM of its own (this class's main), stopped with SIGSTOP.
 */
class PausedProcessTest {

    /** The holder: acquires, says so, waits for a line on stdin, then checks and writes. */
    public static void main(String[] args) throws Exception {
        int port = Integer.parseInt(args[0]);
        try (Relock locks = RelockJedis.create(new HostAndPort("127.0.0.1", port), null)) {
            Hold h = locks.acquire("paused", LockOptions.ttl(Duration.ofMillis(1000)));
            System.out.println("held " + h.token());
            System.out.flush();
            new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8)).readLine();
            try {
                h.check();
                System.out.println("check: held");
            } catch (LockLostException e) {
                System.out.println("check: lost");
            }
            try {
                h.fenced("SET", "paused:data", "stopped-holder");
                System.out.println("fenced: ran");
            } catch (RelockException e) {
                System.out.println("fenced: refused " + e.kind());
            }
            System.out.flush();
        }
    }

    @Test
    void aHolderStoppedLongerThanItsTtlSaysLostAndItsFencedWriteIsRefused() throws Exception {
        try (RedisServer srv = new RedisServer(); Relock locks = RelockJedis.create(srv.address(), null)) {
            String cp = System.getProperty("surefire.test.class.path", System.getProperty("java.class.path"));
            String java = System.getProperty("java.home") + File.separator + "bin" + File.separator + "java";
            Process child = new ProcessBuilder(java, "-cp", cp, PausedProcessTest.class.getName(), String.valueOf(srv.port))
                .redirectErrorStream(true).start();
            try {
                BufferedReader out = new BufferedReader(new InputStreamReader(child.getInputStream(), StandardCharsets.UTF_8));
                // Its first line of its own (a logger may speak first on the merged stderr).
                List<String> before = new ArrayList<>();
                String first = out.readLine();
                while (first != null && !first.startsWith("held ") && before.size() < 50) {
                    before.add(first);
                    first = out.readLine();
                }
                assertTrue(first != null && first.startsWith("held "), "the holder: " + first + " after " + before);
                long stoppedToken = Long.parseLong(first.substring(5));
                signal(child, "STOP");
                // Its lease runs out on the server while it is stopped; then this process takes it.
                long until = System.nanoTime() + TimeUnit.SECONDS.toNanos(30);
                while (!Long.valueOf(0).equals(srv.cmd("EXISTS", "paused"))) {
                    assertTrue(System.nanoTime() < until, "the stopped holder's lease never ran out");
                    Thread.sleep(20);
                }
                Hold mine = locks.acquire("paused", LockOptions.ttl(Duration.ofSeconds(30)).waitAtMost(Duration.ofSeconds(10)));
                assertTrue(mine.token() > stoppedToken);
                assertEquals("OK", mine.fenced("SET", "paused:data", "new-holder"));
                signal(child, "CONT");
                OutputStream in = child.getOutputStream();
                in.write("go\n".getBytes(StandardCharsets.UTF_8));
                in.flush();
                List<String> said = new ArrayList<>();
                for (String line; (line = out.readLine()) != null; ) {
                    said.add(line);
                }
                assertTrue(child.waitFor(30, TimeUnit.SECONDS), "the holder exits");
                assertTrue(said.contains("check: lost"), "the stopped holder knows, from its own clock: " + said);
                assertTrue(said.stream().anyMatch(l -> l.startsWith("fenced: refused")), "its write refused: " + said);
                assertEquals("new-holder", srv.cmd("GET", "paused:data"));
                assertTrue(mine.isHeld());
                mine.release();
            } finally {
                signal(child, "CONT");
                child.destroyForcibly();
            }
        }
    }

    private static void signal(Process p, String sig) throws Exception {
        new ProcessBuilder("kill", "-" + sig, String.valueOf(p.pid())).inheritIO().start().waitFor();
    }
}
