package dev.mobiedit.demo.core;

import java.nio.ByteBuffer;
import java.nio.CharBuffer;
import java.nio.charset.CharsetDecoder;
import java.nio.charset.CodingErrorAction;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.regex.Matcher;
import java.util.regex.Pattern;

/**
 * The bundle's tokenizer.json for byte-level BPE models (GPT-2 style: mobiedit's fact LM,
 * SmolLM2): added/special tokens, the ByteLevel pre-tokenizer (GPT-2 split regex with Unicode
 * whitespace, bytes mapped to printable characters), BPE merges by rank, and the
 * TemplateProcessing post-processor (e.g. {@code <s> $A}). Encodings equal the {@code tokenizers}
 * library's for such files (checked in the JVM tests against fixtures made by it, including
 * SmolLM2-135M-Instruct's 49,152-token file on 1,135 mostly non-ASCII strings). Other tokenizer
 * kinds are refused with a message.
 */
public final class ByteLevelBpe {
    /**
     * Unicode White_Space, what {@code \s} means in the tokenizers library's regex (Oniguruma);
     * Java's {@code \s} is ASCII-only without UNICODE_CHARACTER_CLASS (which Android's API 23
     * regex does not promise), so the class is spelled out.
     */
    private static final String WS =
        "\\t\\n\\x0B\\f\\r\\x20\\x85\\xA0\\u1680\\u2000-\\u200A\\u2028\\u2029\\u202F\\u205F\\u3000";
    /** GPT-2's split regex with {@code \s} / {@code \S} as {@link #WS}. */
    private static final Pattern SPLIT = Pattern.compile(
        "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^" + WS + "\\p{L}\\p{N}]+|[" + WS + "]+(?![^" + WS
            + "])|[" + WS + "]+");
    private static final char[] BYTE_TO_CHAR = new char[256];
    private static final Map<Character, Integer> CHAR_TO_BYTE = new HashMap<Character, Integer>();

    static {
        boolean[] direct = new boolean[256];
        for (int b = '!'; b <= '~'; b++) {
            direct[b] = true;
        }
        for (int b = 0xA1; b <= 0xAC; b++) {
            direct[b] = true;
        }
        for (int b = 0xAE; b <= 0xFF; b++) {
            direct[b] = true;
        }
        int n = 0;
        for (int b = 0; b < 256; b++) {
            BYTE_TO_CHAR[b] = direct[b] ? (char) b : (char) (256 + n++);
            CHAR_TO_BYTE.put(BYTE_TO_CHAR[b], b);
        }
    }

    private final Map<String, Integer> vocab;
    private final String[] idToToken;
    private final Map<String, Integer> mergeRank;
    private final Map<String, Integer> added;
    private final Map<Integer, Boolean> addedSpecial;
    private final List<String> addedByLength;
    private final boolean addPrefixSpace;
    private final int[] prefixIds;
    private final int[] suffixIds;
    private final Map<String, int[]> cache = new HashMap<String, int[]>();

    private ByteLevelBpe(Map<String, Integer> vocab, Map<String, Integer> mergeRank,
            Map<String, Integer> added, Map<Integer, Boolean> addedSpecial,
            boolean addPrefixSpace, int[] prefixIds, int[] suffixIds) {
        this.vocab = vocab;
        this.mergeRank = mergeRank;
        this.added = added;
        this.addedSpecial = addedSpecial;
        this.addPrefixSpace = addPrefixSpace;
        this.prefixIds = prefixIds;
        this.suffixIds = suffixIds;
        int max = -1;
        for (int id : vocab.values()) {
            max = Math.max(max, id);
        }
        for (int id : added.values()) {
            max = Math.max(max, id);
        }
        idToToken = new String[max + 1];
        for (Map.Entry<String, Integer> e : vocab.entrySet()) {
            idToToken[e.getValue()] = e.getKey();
        }
        for (Map.Entry<String, Integer> e : added.entrySet()) {
            idToToken[e.getValue()] = e.getKey();
        }
        addedByLength = new ArrayList<String>(added.keySet());
        java.util.Collections.sort(addedByLength, new java.util.Comparator<String>() {
            @Override
            public int compare(String a, String b) {
                return b.length() - a.length();
            }
        });
    }

    /** Parse tokenizer.json text; {@code where} names the file in errors. */
    @SuppressWarnings("unchecked")
    public static ByteLevelBpe fromJson(String text, String where) {
        Map<String, Object> root = Json.parseObject(text, where);
        String fix = "use a model whose tokenizer is byte-level BPE (e.g. mobiedit's fact LM)";
        Map<String, Object> model = asMap(root.get("model"), where, "model");
        if (!"BPE".equals(model.get("type"))) {
            throw new MobiEditError("model.type is " + model.get("type") + ", not BPE", where, fix);
        }
        if (root.get("normalizer") != null) {
            throw new MobiEditError("has a normalizer, which this app does not implement", where,
                fix);
        }
        Map<String, Object> pre = asMap(root.get("pre_tokenizer"), where, "pre_tokenizer");
        if (!"ByteLevel".equals(pre.get("type")) || Boolean.FALSE.equals(pre.get("use_regex"))) {
            throw new MobiEditError("pre_tokenizer is " + pre.get("type") + ", not ByteLevel",
                where, fix);
        }
        Map<String, Integer> vocab = new HashMap<String, Integer>();
        for (Map.Entry<String, Object> e : asMap(model.get("vocab"), where, "model.vocab")
                .entrySet()) {
            vocab.put(e.getKey(), ((Long) e.getValue()).intValue());
        }
        Map<String, Integer> ranks = new HashMap<String, Integer>();
        List<Object> merges = (List<Object>) model.get("merges");
        for (int i = 0; merges != null && i < merges.size(); i++) {
            Object m = merges.get(i);
            String a;
            String b;
            if (m instanceof String) {
                int sp = ((String) m).indexOf(' ');
                a = ((String) m).substring(0, sp);
                b = ((String) m).substring(sp + 1);
            } else {
                a = (String) ((List<Object>) m).get(0);
                b = (String) ((List<Object>) m).get(1);
            }
            ranks.put(a + '\u0000' + b, i);
        }
        Map<String, Integer> added = new LinkedHashMap<String, Integer>();
        Map<Integer, Boolean> special = new HashMap<Integer, Boolean>();
        List<Object> at = (List<Object>) root.get("added_tokens");
        for (int i = 0; at != null && i < at.size(); i++) {
            Map<String, Object> t = (Map<String, Object>) at.get(i);
            int id = ((Long) t.get("id")).intValue();
            added.put((String) t.get("content"), id);
            special.put(id, Boolean.TRUE.equals(t.get("special")));
        }
        int[][] template = template(root.get("post_processor"), added, where);
        return new ByteLevelBpe(vocab, ranks, added, special,
            Boolean.TRUE.equals(pre.get("add_prefix_space")), template[0], template[1]);
    }

    /** (ids before $A, ids after $A) of a TemplateProcessing "single" template. */
    @SuppressWarnings("unchecked")
    private static int[][] template(Object pp, Map<String, Integer> added, String where) {
        int[][] none = {new int[0], new int[0]};
        if (pp == null || "ByteLevel".equals(((Map<String, Object>) pp).get("type"))) {
            return none;
        }
        Map<String, Object> p = (Map<String, Object>) pp;
        if (!"TemplateProcessing".equals(p.get("type"))) {
            throw new MobiEditError("post_processor " + p.get("type") + " is not supported", where,
                "use TemplateProcessing (e.g. '<s> $A') or none");
        }
        List<Integer> before = new ArrayList<Integer>();
        List<Integer> after = new ArrayList<Integer>();
        boolean seenA = false;
        for (Object item : (List<Object>) p.get("single")) {
            Map<String, Object> it = (Map<String, Object>) item;
            if (it.containsKey("Sequence")) {
                seenA = true;
                continue;
            }
            Map<String, Object> sp = (Map<String, Object>) it.get("SpecialToken");
            String name = (String) sp.get("id");
            Map<String, Object> specials = (Map<String, Object>) p.get("special_tokens");
            List<Object> ids = (List<Object>) ((Map<String, Object>) specials.get(name)).get("ids");
            for (Object id : ids) {
                (seenA ? after : before).add(((Long) id).intValue());
            }
        }
        return new int[][] {toArray(before), toArray(after)};
    }

    /** Token ids of {@code text}; with the template's special tokens if {@code addSpecial}. */
    public int[] encode(String text, boolean addSpecial) {
        List<Integer> out = new ArrayList<Integer>();
        if (addSpecial) {
            for (int id : prefixIds) {
                out.add(id);
            }
        }
        int start = 0;
        int i = 0;
        while (i < text.length()) {
            String hit = addedAt(text, i);
            if (hit == null) {
                i++;
                continue;
            }
            encodeSegment(text.substring(start, i), out);
            out.add(added.get(hit));
            i += hit.length();
            start = i;
        }
        encodeSegment(text.substring(start), out);
        if (addSpecial) {
            for (int id : suffixIds) {
                out.add(id);
            }
        }
        return toArray(out);
    }

    /** Text of {@code ids}; special tokens are left out when {@code skipSpecial}. */
    public String decode(int[] ids, boolean skipSpecial) {
        java.io.ByteArrayOutputStream bytes = new java.io.ByteArrayOutputStream();
        StringBuilder out = new StringBuilder();
        for (int id : ids) {
            String tok = id >= 0 && id < idToToken.length ? idToToken[id] : null;
            if (tok == null) {
                continue;
            }
            Boolean isSpecial = addedSpecial.get(id);
            if (isSpecial != null) {
                if (!(isSpecial && skipSpecial)) {
                    flush(bytes, out);
                    out.append(tok);
                }
                continue;
            }
            for (int k = 0; k < tok.length(); k++) {
                Integer b = CHAR_TO_BYTE.get(tok.charAt(k));
                if (b != null) {
                    bytes.write(b);
                }
            }
        }
        flush(bytes, out);
        return out.toString();
    }

    /** Id of a token string (vocab or added), or -1. */
    public int tokenId(String token) {
        Integer id = added.get(token);
        if (id == null) {
            id = vocab.get(token);
        }
        return id == null ? -1 : id;
    }

    /** Vocabulary size including added tokens (max id + 1). */
    public int size() {
        return idToToken.length;
    }

    // ------------------------------------------------------------------ internals

    private String addedAt(String text, int i) {
        for (String a : addedByLength) {
            if (a.length() > 0 && text.startsWith(a, i)) {
                return a;
            }
        }
        return null;
    }

    private void encodeSegment(String segment, List<Integer> out) {
        if (segment.length() == 0) {
            return;
        }
        if (addPrefixSpace && !segment.startsWith(" ")) {
            segment = " " + segment;
        }
        Matcher m = SPLIT.matcher(segment);
        while (m.find()) {
            for (int id : word(m.group())) {
                out.add(id);
            }
        }
    }

    /** BPE of one pre-token: UTF-8 bytes mapped to chars, merged by rank, mapped to ids. */
    private int[] word(String piece) {
        int[] hit = cache.get(piece);
        if (hit != null) {
            return hit;
        }
        byte[] utf8 = piece.getBytes(Files2.UTF8);
        List<String> sym = new ArrayList<String>(utf8.length);
        for (byte b : utf8) {
            sym.add(String.valueOf(BYTE_TO_CHAR[b & 0xFF]));
        }
        while (sym.size() > 1) {
            int best = Integer.MAX_VALUE;
            int at = -1;
            for (int i = 0; i + 1 < sym.size(); i++) {
                Integer r = mergeRank.get(sym.get(i) + '\u0000' + sym.get(i + 1));
                if (r != null && r < best) {
                    best = r;
                    at = i;
                }
            }
            if (at < 0) {
                break;
            }
            String a = sym.get(at);
            String b = sym.get(at + 1);
            List<String> next = new ArrayList<String>(sym.size());
            for (int i = 0; i < sym.size(); i++) {
                if (i + 1 < sym.size() && sym.get(i).equals(a) && sym.get(i + 1).equals(b)) {
                    next.add(a + b);
                    i++;
                } else {
                    next.add(sym.get(i));
                }
            }
            sym = next;
        }
        int[] ids = new int[sym.size()];
        for (int i = 0; i < ids.length; i++) {
            Integer id = vocab.get(sym.get(i));
            if (id == null) {
                throw new MobiEditError("token '" + sym.get(i) + "' is not in the vocabulary",
                    "tokenizer.json", "use a byte-level BPE whose vocabulary holds all 256 bytes");
            }
            ids[i] = id;
        }
        if (cache.size() < 50000) {
            cache.put(piece, ids);
        }
        return ids;
    }

    private static void flush(java.io.ByteArrayOutputStream bytes, StringBuilder out) {
        if (bytes.size() == 0) {
            return;
        }
        CharsetDecoder dec = Files2.UTF8.newDecoder()
            .onMalformedInput(CodingErrorAction.REPLACE)
            .onUnmappableCharacter(CodingErrorAction.REPLACE);
        try {
            CharBuffer cb = dec.decode(ByteBuffer.wrap(bytes.toByteArray()));
            out.append(cb);
        } catch (java.nio.charset.CharacterCodingException e) {
            throw new IllegalStateException(e);
        }
        bytes.reset();
    }

    @SuppressWarnings("unchecked")
    private static Map<String, Object> asMap(Object o, String where, String field) {
        if (!(o instanceof Map)) {
            throw new MobiEditError("field '" + field + "' is missing or not an object", where,
                "use the tokenizer.json written by mobiedit export");
        }
        return (Map<String, Object>) o;
    }

    private static int[] toArray(List<Integer> l) {
        int[] a = new int[l.size()];
        for (int i = 0; i < a.length; i++) {
            a[i] = l.get(i);
        }
        return a;
    }
}
