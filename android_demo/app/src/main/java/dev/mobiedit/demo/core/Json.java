package dev.mobiedit.demo.core;

import java.math.BigDecimal;
import java.util.ArrayList;
import java.util.Collections;
import java.util.Iterator;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;

/**
 * A small strict JSON reader and a writer whose output matches Python's
 * {@code json.dumps(obj, sort_keys=True, ensure_ascii=False)} (separators ", " and ": "), so that
 * journal.jsonl lines written here read back identically in mobiedit/journal.py.
 *
 * <p>Types: object = {@code LinkedHashMap<String,Object>} (key order kept), array =
 * {@code ArrayList<Object>}, string, number = {@code Long} (no '.', 'e' or 'E', fits in a long)
 * or {@code Double}, {@code Boolean}, null = Java null. Errors are {@link MobiEditError}s naming
 * the character offset.
 */
public final class Json {
    private final String text;
    private final String where;
    private int pos;

    private Json(String text, String where) {
        this.text = text;
        this.where = where;
    }

    /** Parse one JSON value (the whole text); {@code where} names the source in errors. */
    public static Object parse(String text, String where) {
        Json p = new Json(text, where);
        p.skipWs();
        Object v = p.value(0);
        p.skipWs();
        if (p.pos != text.length()) {
            throw p.fail("unexpected text after the JSON value");
        }
        return v;
    }

    /** Parse a JSON object; error if the text holds another kind of value. */
    @SuppressWarnings("unchecked")
    public static Map<String, Object> parseObject(String text, String where) {
        Object v = parse(text, where);
        if (!(v instanceof Map)) {
            throw new MobiEditError("top level is a JSON " + typeName(v) + ", not an object",
                where, "write a JSON object { ... }");
        }
        return (Map<String, Object>) v;
    }

    /** Python-compatible JSON text of {@code value} (keys sorted when {@code sortKeys}). */
    public static String write(Object value, boolean sortKeys) {
        StringBuilder sb = new StringBuilder();
        write(sb, value, sortKeys, false);
        return sb.toString();
    }

    /** Compact JSON (separators "," and ":", key order kept), as safetensors headers use. */
    public static String writeCompact(Object value) {
        StringBuilder sb = new StringBuilder();
        write(sb, value, false, true);
        return sb.toString();
    }

    /** JSON type name of a parsed value, for messages ("object", "string", ...). */
    public static String typeName(Object v) {
        if (v == null) {
            return "null";
        }
        if (v instanceof Map) {
            return "object";
        }
        if (v instanceof List) {
            return "array";
        }
        if (v instanceof String) {
            return "string";
        }
        if (v instanceof Boolean) {
            return "boolean";
        }
        return v instanceof Long ? "integer" : "number";
    }

    // ------------------------------------------------------------------ reader

    private MobiEditError fail(String msg) {
        return new MobiEditError("malformed JSON at character " + pos + " (" + msg + ")", where,
            "fix or re-create the file");
    }

    private void skipWs() {
        while (pos < text.length()) {
            char c = text.charAt(pos);
            if (c != ' ' && c != '\t' && c != '\n' && c != '\r') {
                break;
            }
            pos++;
        }
    }

    private Object value(int depth) {
        if (depth > 256) {
            throw fail("nested too deeply");
        }
        if (pos >= text.length()) {
            throw fail("unexpected end of text");
        }
        char c = text.charAt(pos);
        switch (c) {
            case '{':
                return object(depth);
            case '[':
                return array(depth);
            case '"':
                return string();
            case 't':
                return literal("true", Boolean.TRUE);
            case 'f':
                return literal("false", Boolean.FALSE);
            case 'n':
                return literal("null", null);
            default:
                if (c == '-' || (c >= '0' && c <= '9')) {
                    return number();
                }
                throw fail("unexpected character '" + c + "'");
        }
    }

    private Object literal(String word, Object v) {
        if (!text.startsWith(word, pos)) {
            throw fail("expected " + word);
        }
        pos += word.length();
        return v;
    }

    private Map<String, Object> object(int depth) {
        Map<String, Object> out = new LinkedHashMap<String, Object>();
        pos++;
        skipWs();
        if (pos < text.length() && text.charAt(pos) == '}') {
            pos++;
            return out;
        }
        while (true) {
            skipWs();
            if (pos >= text.length() || text.charAt(pos) != '"') {
                throw fail("expected a string key");
            }
            String key = string();
            skipWs();
            expect(':');
            skipWs();
            if (out.containsKey(key)) {
                throw fail("duplicate key \"" + key + "\"");
            }
            out.put(key, value(depth + 1));
            skipWs();
            if (pos < text.length() && text.charAt(pos) == ',') {
                pos++;
                continue;
            }
            expect('}');
            return out;
        }
    }

    private List<Object> array(int depth) {
        List<Object> out = new ArrayList<Object>();
        pos++;
        skipWs();
        if (pos < text.length() && text.charAt(pos) == ']') {
            pos++;
            return out;
        }
        while (true) {
            skipWs();
            out.add(value(depth + 1));
            skipWs();
            if (pos < text.length() && text.charAt(pos) == ',') {
                pos++;
                continue;
            }
            expect(']');
            return out;
        }
    }

    private void expect(char c) {
        if (pos >= text.length() || text.charAt(pos) != c) {
            throw fail("expected '" + c + "'");
        }
        pos++;
    }

    private String string() {
        pos++;
        StringBuilder sb = new StringBuilder();
        while (true) {
            if (pos >= text.length()) {
                throw fail("unterminated string");
            }
            char c = text.charAt(pos++);
            if (c == '"') {
                return sb.toString();
            }
            if (c < 0x20) {
                throw fail("control character in string");
            }
            if (c != '\\') {
                sb.append(c);
                continue;
            }
            if (pos >= text.length()) {
                throw fail("unterminated escape");
            }
            char e = text.charAt(pos++);
            switch (e) {
                case '"': sb.append('"'); break;
                case '\\': sb.append('\\'); break;
                case '/': sb.append('/'); break;
                case 'b': sb.append('\b'); break;
                case 'f': sb.append('\f'); break;
                case 'n': sb.append('\n'); break;
                case 'r': sb.append('\r'); break;
                case 't': sb.append('\t'); break;
                case 'u':
                    if (pos + 4 > text.length()) {
                        throw fail("short \\u escape");
                    }
                    try {
                        sb.append((char) Integer.parseInt(text.substring(pos, pos + 4), 16));
                    } catch (NumberFormatException ex) {
                        throw fail("bad \\u escape");
                    }
                    pos += 4;
                    break;
                default:
                    throw fail("bad escape \\" + e);
            }
        }
    }

    private Object number() {
        int start = pos;
        if (text.charAt(pos) == '-') {
            pos++;
        }
        boolean integral = true;
        int digits = 0;
        while (pos < text.length()) {
            char c = text.charAt(pos);
            if (c >= '0' && c <= '9') {
                digits++;
            } else if (c == '.' || c == 'e' || c == 'E' || c == '+' || c == '-') {
                integral = false;
            } else {
                break;
            }
            pos++;
        }
        String s = text.substring(start, pos);
        if (digits == 0) {
            throw fail("bad number '" + s + "'");
        }
        try {
            if (integral) {
                return Long.valueOf(s);
            }
            return Double.valueOf(s);
        } catch (NumberFormatException ex) {
            if (integral) {
                return Double.valueOf(s);
            }
            throw fail("bad number '" + s + "'");
        }
    }

    // ------------------------------------------------------------------ writer

    @SuppressWarnings("unchecked")
    private static void write(StringBuilder sb, Object v, boolean sortKeys, boolean compact) {
        if (v == null) {
            sb.append("null");
        } else if (v instanceof String) {
            quote(sb, (String) v);
        } else if (v instanceof Boolean) {
            sb.append(((Boolean) v).booleanValue() ? "true" : "false");
        } else if (v instanceof Long || v instanceof Integer || v instanceof Short
                || v instanceof Byte) {
            sb.append(((Number) v).longValue());
        } else if (v instanceof Number) {
            sb.append(pyFloat(((Number) v).doubleValue()));
        } else if (v instanceof Map) {
            Map<String, Object> m = (Map<String, Object>) v;
            List<String> keys = new ArrayList<String>(m.keySet());
            if (sortKeys) {
                Collections.sort(keys);
            }
            sb.append('{');
            for (int i = 0; i < keys.size(); i++) {
                if (i > 0) {
                    sb.append(compact ? "," : ", ");
                }
                quote(sb, keys.get(i));
                sb.append(compact ? ":" : ": ");
                write(sb, m.get(keys.get(i)), sortKeys, compact);
            }
            sb.append('}');
        } else if (v instanceof List) {
            sb.append('[');
            Iterator<Object> it = ((List<Object>) v).iterator();
            boolean first = true;
            while (it.hasNext()) {
                if (!first) {
                    sb.append(compact ? "," : ", ");
                }
                first = false;
                write(sb, it.next(), sortKeys, compact);
            }
            sb.append(']');
        } else {
            throw new IllegalArgumentException("cannot write a " + v.getClass().getName()
                + " as JSON");
        }
    }

    private static void quote(StringBuilder sb, String s) {
        sb.append('"');
        for (int i = 0; i < s.length(); i++) {
            char c = s.charAt(i);
            switch (c) {
                case '"': sb.append("\\\""); break;
                case '\\': sb.append("\\\\"); break;
                case '\n': sb.append("\\n"); break;
                case '\r': sb.append("\\r"); break;
                case '\t': sb.append("\\t"); break;
                case '\b': sb.append("\\b"); break;
                case '\f': sb.append("\\f"); break;
                default:
                    if (c < 0x20) {
                        sb.append(String.format("\\u%04x", (int) c));
                    } else {
                        sb.append(c);
                    }
            }
        }
        sb.append('"');
    }

    /**
     * Python's {@code repr(float)}: shortest round-trip digits, positional for decimal exponents
     * in [-4, 16), else {@code d.ddde±XX}. NaN / Infinity are refused (not JSON).
     */
    public static String pyFloat(double v) {
        if (Double.isNaN(v) || Double.isInfinite(v)) {
            throw new IllegalArgumentException("NaN / Infinity cannot be written as JSON");
        }
        if (v == 0.0) {
            return (1.0 / v < 0) ? "-0.0" : "0.0";
        }
        BigDecimal bd = new BigDecimal(Double.toString(v)).stripTrailingZeros();
        String digits = bd.unscaledValue().abs().toString();
        int exp = digits.length() - 1 - bd.scale();  // decimal exponent of the first digit
        String sign = v < 0 ? "-" : "";
        if (exp >= -4 && exp < 16) {
            String plain = bd.abs().toPlainString();
            if (plain.indexOf('.') < 0) {
                plain = plain + ".0";
            }
            return sign + plain;
        }
        String mant = digits.length() == 1 ? digits : digits.charAt(0) + "." + digits.substring(1);
        String e = Integer.toString(Math.abs(exp));
        if (e.length() < 2) {
            e = "0" + e;
        }
        return sign + mant + "e" + (exp < 0 ? "-" : "+") + e;
    }
}
