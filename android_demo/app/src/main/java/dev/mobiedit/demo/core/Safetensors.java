package dev.mobiedit.demo.core;

import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;

/**
 * The safetensors format: 8-byte little-endian header length N, N bytes of JSON header
 * ({@code name -> {"dtype", "shape", "data_offsets": [begin, end]}} plus optional
 * {@code "__metadata__"} of strings), then the raw data. Used for journal factors
 * ({@code u} [d_out], {@code w} [d_in], float32), base weights and keystats.
 */
public final class Safetensors {
    private static final long MAX_HEADER = 100L << 20;
    private static final String FIX = "re-create the file (it is not valid safetensors)";

    /** Parsed file: tensors in header order and the metadata strings. */
    public static final class Contents {
        public final Map<String, Tensor> tensors;
        public final Map<String, String> metadata;

        Contents(Map<String, Tensor> tensors, Map<String, String> metadata) {
            this.tensors = tensors;
            this.metadata = metadata;
        }

        /** The tensor {@code name}; MobiEditError naming the file when absent. */
        public Tensor get(String name, String where) {
            Tensor t = tensors.get(name);
            if (t == null) {
                throw new MobiEditError("has no tensor '" + name + "' (has " + tensors.keySet()
                    + ")", where, FIX);
            }
            return t;
        }
    }

    private Safetensors() {
    }

    /** Parse {@code data}; {@code where} names the file in errors. */
    @SuppressWarnings("unchecked")
    public static Contents parse(byte[] data, String where) {
        if (data.length < 8) {
            throw new MobiEditError("file is shorter than the 8-byte header length", where, FIX);
        }
        long n = ByteBuffer.wrap(data, 0, 8).order(ByteOrder.LITTLE_ENDIAN).getLong();
        if (n < 2 || n > MAX_HEADER || n > data.length - 8) {
            throw new MobiEditError("header length " + n + " does not fit the file of "
                + data.length + " bytes", where, FIX);
        }
        String header = new String(data, 8, (int) n, Files2.UTF8);
        Map<String, Object> h = Json.parseObject(header, where + " (header)");
        int base = 8 + (int) n;
        long size = data.length - base;
        Map<String, Tensor> tensors = new LinkedHashMap<String, Tensor>();
        Map<String, String> meta = new LinkedHashMap<String, String>();
        for (Map.Entry<String, Object> e : h.entrySet()) {
            String key = e.getKey();
            if ("__metadata__".equals(key)) {
                if (e.getValue() instanceof Map) {
                    for (Map.Entry<String, Object> m : ((Map<String, Object>) e.getValue()).entrySet()) {
                        meta.put(m.getKey(), String.valueOf(m.getValue()));
                    }
                }
                continue;
            }
            tensors.put(key, tensor(key, e.getValue(), data, base, size, where));
        }
        return new Contents(tensors, meta);
    }

    @SuppressWarnings("unchecked")
    private static Tensor tensor(String key, Object spec, byte[] data, int base, long size,
            String where) {
        String w = where + ", tensor '" + key + "'";
        if (!(spec instanceof Map)) {
            throw new MobiEditError("header entry is not an object", w, FIX);
        }
        Map<String, Object> s = (Map<String, Object>) spec;
        Object dtype = s.get("dtype");
        if (!(dtype instanceof String) || Tensor.itemSize((String) dtype) < 0) {
            throw new MobiEditError("unknown dtype " + dtype, w, FIX);
        }
        long[] shape = longs(s.get("shape"), w + ", field 'shape'");
        long[] off = longs(s.get("data_offsets"), w + ", field 'data_offsets'");
        long bytes = Tensor.numel(shape) * Tensor.itemSize((String) dtype);
        if (off.length != 2 || off[0] > off[1] || off[1] > size || off[1] - off[0] != bytes) {
            throw new MobiEditError("data_offsets do not match dtype/shape or the file size", w,
                FIX);
        }
        byte[] raw = new byte[(int) bytes];
        System.arraycopy(data, base + (int) off[0], raw, 0, (int) bytes);
        return new Tensor(key, (String) dtype, shape, raw);
    }

    private static long[] longs(Object v, String where) {
        if (!(v instanceof List)) {
            throw new MobiEditError("must be a list of integers", where, FIX);
        }
        List<?> l = (List<?>) v;
        long[] out = new long[l.size()];
        for (int i = 0; i < out.length; i++) {
            if (!(l.get(i) instanceof Long) || (Long) l.get(i) < 0) {
                throw new MobiEditError("must be a list of integers >= 0", where, FIX);
            }
            out[i] = (Long) l.get(i);
        }
        return out;
    }

    /** Serialize tensors (in the given order) and metadata; header padded with spaces to 8. */
    public static byte[] write(List<Tensor> tensors, Map<String, String> metadata) {
        Map<String, Object> header = new LinkedHashMap<String, Object>();
        if (metadata != null && !metadata.isEmpty()) {
            header.put("__metadata__", new LinkedHashMap<String, Object>(metadata));
        }
        long offset = 0;
        for (Tensor t : tensors) {
            Map<String, Object> spec = new LinkedHashMap<String, Object>();
            spec.put("dtype", t.dtype);
            List<Object> shape = new ArrayList<Object>();
            for (long s : t.shape()) {
                shape.add(s);
            }
            spec.put("shape", shape);
            List<Object> off = new ArrayList<Object>();
            off.add(offset);
            offset += t.raw().length;
            off.add(offset);
            spec.put("data_offsets", off);
            header.put(t.name, spec);
        }
        StringBuilder json = new StringBuilder(Json.writeCompact(header));
        while ((json.toString().getBytes(Files2.UTF8).length) % 8 != 0) {
            json.append(' ');
        }
        byte[] hb = json.toString().getBytes(Files2.UTF8);
        ByteBuffer out = ByteBuffer.allocate(8 + hb.length + (int) offset)
            .order(ByteOrder.LITTLE_ENDIAN);
        out.putLong(hb.length);
        out.put(hb);
        for (Tensor t : tensors) {
            out.put(t.raw());
        }
        return out.array();
    }
}
