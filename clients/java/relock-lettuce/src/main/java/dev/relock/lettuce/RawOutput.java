package dev.relock.lettuce;

import dev.relock.ReplyError;
import io.lettuce.core.codec.ByteArrayCodec;
import io.lettuce.core.output.CommandOutput;
import java.nio.ByteBuffer;
import java.nio.charset.StandardCharsets;
import java.util.ArrayDeque;
import java.util.ArrayList;
import java.util.Deque;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;

/**
 * Any reply, as a {@link dev.relock.Transport} gives it: null, Long, String (UTF-8), Double,
 * Boolean, List (array, set, push), Map (RESP3 map, in order); an error inside an array is a
 * {@link ReplyError} element (an error at the top is the command's error, thrown by the caller).
 */
final class RawOutput extends CommandOutput<byte[], byte[], Object> {
    /** An aggregate being filled: a list, or a map's keys and values one after the other. */
    private static final class Agg {
        final List<Object> items = new ArrayList<>();
        final boolean map;
        final int expected;

        Agg(boolean map, int expected) {
            this.map = map;
            this.expected = expected;
        }
    }

    private final Deque<Agg> stack = new ArrayDeque<>();
    private Agg top;
    @SuppressWarnings("unused")
    private boolean initialized;

    RawOutput() {
        super(ByteArrayCodec.INSTANCE, null);
    }

    private void add(Object v) {
        if (top == null) {
            output = v;
            initialized = true;
            return;
        }
        top.items.add(v);
        // An aggregate is complete once its count of elements came: back to its parent.
        while (top != null && top.items.size() >= top.expected) {
            top = stack.isEmpty() ? null : stack.pop();
        }
    }

    @Override
    public void set(ByteBuffer bytes) {
        add(bytes == null ? null : StandardCharsets.UTF_8.decode(bytes).toString());
    }

    @Override
    public void setSingle(ByteBuffer bytes) {
        set(bytes);
    }

    @Override
    public void setBigNumber(ByteBuffer bytes) {
        set(bytes);
    }

    @Override
    public void set(long integer) {
        add(integer);
    }

    @Override
    public void set(double number) {
        add(number);
    }

    @Override
    public void set(boolean value) {
        add(value);
    }

    @Override
    public void setError(ByteBuffer error) {
        setError(error == null ? "" : StandardCharsets.UTF_8.decode(error).toString());
    }

    @Override
    public void setError(String error) {
        if (top == null) {
            super.setError(error); // the command's own error: the future fails with it
        } else {
            add(new ReplyError(error));
        }
    }

    private void open(int count, boolean map) {
        if (count < 0) {
            add(null); // a null array
            return;
        }
        Agg a = new Agg(map, map ? 2 * count : count);
        if (top == null) {
            output = a;
            initialized = true;
        } else {
            top.items.add(a);
            stack.push(top);
        }
        top = a;
        while (top != null && top.items.size() >= top.expected) {
            top = stack.isEmpty() ? null : stack.pop();
        }
    }

    @Override
    public void multi(int count) {
        open(count, false);
    }

    @Override
    public void multiArray(int count) {
        open(count, false);
    }

    @Override
    public void multiPush(int count) {
        open(count, false);
    }

    @Override
    public void multiSet(int count) {
        open(count, false);
    }

    @Override
    public void multiMap(int count) {
        open(count, true);
    }

    @Override
    public void complete(int d) {
        // aggregates end by their counts (see add)
    }

    @Override
    public Object get() {
        return convert(output);
    }

    private static Object convert(Object v) {
        if (v instanceof Agg a) {
            if (a.map) {
                Map<Object, Object> m = new LinkedHashMap<>();
                for (int i = 0; i + 1 < a.items.size(); i += 2) {
                    m.put(convert(a.items.get(i)), convert(a.items.get(i + 1)));
                }
                return m;
            }
            List<Object> out = new ArrayList<>(a.items.size());
            for (Object x : a.items) {
                out.add(convert(x));
            }
            return out;
        }
        return v;
    }
}
