package dev.relock.testing;

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
import dev.relock.ReplyError;
import java.io.BufferedInputStream;
import java.io.InputStream;
import java.io.OutputStream;
import java.net.InetSocketAddress;
import java.net.Socket;
import java.nio.charset.StandardCharsets;

/**
 * A redis-server of the test's own, with the relock module of this tree, on a free port in a
 * directory of its own; close() (try-with-resources, or the JVM's exit) kills it. Every module's
 * tests use it (from relock-core's test jar), through a subclass that adds the address in its
 * driver's type; its own commands go over a plain socket in RESP2, through no driver.
 */
public class RedisServer implements AutoCloseable {
    public final int port;
    protected final Path dir;
    private final Process process;

    public static String module() {
        String m = System.getProperty("relock.module", System.getenv("RELOCK_MODULE"));
        if (m == null || !new File(m).isFile()) {
            throw new IllegalStateException("the relock module is not at " + m
                + " (cargo build -p relock, or set RELOCK_MODULE / -Drelock.module)");
        }
        return new File(m).getAbsolutePath();
    }

    /**
     * A port nobody listens on, below the kernel's ephemeral range (10000 up to it): a port from
     * bind(0) is in that range, where any outgoing connection may take it between a server's
     * kill and its restart on the same port ("Address already in use", as the module's suites
     * found in a fresh make test).
     */
    public static int freePort() throws IOException {
        int low = 32768;
        try {
            String range = java.nio.file.Files.readString(java.nio.file.Path.of("/proc/sys/net/ipv4/ip_local_port_range"));
            low = Integer.parseInt(range.trim().split("\\s+")[0]);
        } catch (IOException | RuntimeException e) {
            // not Linux: the default range
        }
        for (int i = 0; low > 11000 && i < 200; i++) {
            int port = 10000 + java.util.concurrent.ThreadLocalRandom.current().nextInt(low - 10000);
            try (ServerSocket s = new ServerSocket()) {
                s.bind(new java.net.InetSocketAddress("127.0.0.1", port));
                return port;
            } catch (IOException taken) {
                // another
            }
        }
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
            try {
                if ("PONG".equals(raw(port, "PING"))) {
                    return true;
                }
            } catch (IOException | RuntimeException e) {
                Thread.sleep(20); // not listening yet: poll again (a readiness wait bounded above)
            }
        }
        return false;
    }

    /** host:port. */
    public String hostPort() {
        return "127.0.0.1:" + port;
    }

    /** A raw command on a connection of its own (the test's, not relock's; RESP2, no driver). */
    public Object cmd(Object... args) {
        try {
            Object v = raw(port, args);
            if (v instanceof ReplyError e) {
                throw e;
            }
            return v;
        } catch (IOException e) {
            throw new java.io.UncheckedIOException(e);
        }
    }

    public static Object raw(int port, Object... args) throws IOException {
        try (Socket s = new Socket()) {
            s.connect(new InetSocketAddress("127.0.0.1", port), 2000);
            s.setSoTimeout(10_000);
            OutputStream out = s.getOutputStream();
            java.io.ByteArrayOutputStream b = new java.io.ByteArrayOutputStream();
            b.writeBytes(("*" + args.length + "\r\n").getBytes(StandardCharsets.UTF_8));
            for (Object a : args) {
                byte[] v = a instanceof byte[] raw ? raw : String.valueOf(a).getBytes(StandardCharsets.UTF_8);
                b.writeBytes(("$" + v.length + "\r\n").getBytes(StandardCharsets.UTF_8));
                b.writeBytes(v);
                b.writeBytes("\r\n".getBytes(StandardCharsets.UTF_8));
            }
            out.write(b.toByteArray());
            out.flush();
            return read(new BufferedInputStream(s.getInputStream()));
        }
    }

    private static String line(InputStream in) throws IOException {
        StringBuilder b = new StringBuilder();
        int c;
        while ((c = in.read()) != '\r') {
            if (c < 0) {
                throw new IOException("connection closed");
            }
            b.append((char) c);
        }
        in.read();
        return b.toString();
    }

    private static Object read(InputStream in) throws IOException {
        int t = in.read();
        String l = line(in);
        switch (t) {
            case '+': return l;
            case '-': return new ReplyError(l);
            case ':': return Long.parseLong(l);
            case '$': {
                int n = Integer.parseInt(l);
                if (n < 0) {
                    return null;
                }
                byte[] v = in.readNBytes(n);
                in.read();
                in.read();
                return new String(v, StandardCharsets.UTF_8);
            }
            case '*': {
                int n = Integer.parseInt(l);
                if (n < 0) {
                    return null;
                }
                List<Object> out = new ArrayList<>();
                for (int i = 0; i < n; i++) {
                    out.add(read(in));
                }
                return out;
            }
            default: throw new IOException("unexpected reply type " + (char) t);
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
