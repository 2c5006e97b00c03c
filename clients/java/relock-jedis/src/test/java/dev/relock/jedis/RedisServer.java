package dev.relock.jedis;

import java.io.File;
import java.io.IOException;
import java.net.ServerSocket;
import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Comparator;
import java.util.List;
import java.util.stream.Stream;
import redis.clients.jedis.Connection;
import redis.clients.jedis.DefaultJedisClientConfig;
import redis.clients.jedis.HostAndPort;
import redis.clients.jedis.Protocol;

/**
 * A redis-server of the test's own, with the relock module of this tree, on a free port in a
 * directory of its own; close() (try-with-resources, or the JVM's exit) kills it.
 */
public final class RedisServer implements AutoCloseable {
    public final int port;
    final Path dir;
    private final Process process;

    static String module() {
        String m = System.getProperty("relock.module", System.getenv("RELOCK_MODULE"));
        if (m == null || !new File(m).isFile()) {
            throw new IllegalStateException("the relock module is not at " + m
                + " (cargo build -p relock, or set RELOCK_MODULE / -Drelock.module)");
        }
        return new File(m).getAbsolutePath();
    }

    static int freePort() throws IOException {
        try (ServerSocket s = new ServerSocket(0)) {
            return s.getLocalPort();
        }
    }

    public RedisServer(String... extra) throws IOException, InterruptedException {
        this(true, extra);
    }

    public RedisServer(boolean withModule, String... extra) throws IOException, InterruptedException {
        IOException last = null;
        for (int attempt = 0; attempt < 5; attempt++) {
            int p = freePort();
            Path d = Files.createTempDirectory("relock-java-");
            List<String> cmd = new ArrayList<>(List.of("redis-server", "--port", String.valueOf(p), "--bind", "127.0.0.1",
                "--dir", d.toString(), "--save", "", "--appendonly", "no", "--logfile", "redis.log"));
            if (withModule) {
                cmd.addAll(List.of("--loadmodule", module()));
            }
            cmd.addAll(List.of(extra));
            Process proc = new ProcessBuilder(cmd).redirectErrorStream(true).redirectOutput(d.resolve("stdout").toFile()).start();
            if (ready(p, proc)) {
                this.port = p;
                this.dir = d;
                this.process = proc;
                Runtime.getRuntime().addShutdownHook(new Thread(proc::destroyForcibly));
                return;
            }
            proc.destroyForcibly().waitFor();
            last = new IOException("redis-server did not start on " + p + ": " + log(d));
        }
        throw last;
    }

    private static String log(Path d) {
        try {
            return Files.readString(d.resolve("redis.log"));
        } catch (IOException e) {
            return "(no log)";
        }
    }

    private static boolean ready(int port, Process proc) throws InterruptedException {
        long until = System.nanoTime() + Duration.ofSeconds(10).toNanos();
        while (System.nanoTime() < until && proc.isAlive()) {
            try (Connection c = new Connection(new HostAndPort("127.0.0.1", port), DefaultJedisClientConfig.builder().build())) {
                c.sendCommand(Protocol.Command.PING);
                if ("PONG".equals(c.getStatusCodeReply())) {
                    return true;
                }
            } catch (RuntimeException e) {
                Thread.sleep(20); // not listening yet: poll again (a readiness wait bounded above)
            }
        }
        return false;
    }

    public HostAndPort address() {
        return new HostAndPort("127.0.0.1", port);
    }

    /** A raw command on a connection of its own (the test's, not relock's). */
    public Object cmd(Object... args) {
        try (Connection c = new Connection(address(), DefaultJedisClientConfig.builder().build())) {
            c.sendCommand(JedisTransport.args(args));
            return JedisTransport.convert(c.getOne());
        }
    }

    /** Stops (SIGSTOP) or continues (SIGCONT) the server process. */
    public void signal(String sig) throws IOException, InterruptedException {
        new ProcessBuilder("kill", "-" + sig, String.valueOf(process.pid())).inheritIO().start().waitFor();
    }

    @Override
    public void close() {
        try {
            process.destroy();
            if (!process.waitFor(5, java.util.concurrent.TimeUnit.SECONDS)) {
                process.destroyForcibly().waitFor();
            }
        } catch (InterruptedException e) {
            process.destroyForcibly();
            Thread.currentThread().interrupt();
        }
        try (Stream<Path> files = Files.walk(dir)) {
            files.sorted(Comparator.reverseOrder()).forEach(f -> f.toFile().delete());
        } catch (IOException e) {
            // a temporary directory left behind
        }
    }
}
