package dev.mobiedit.demo.core;

import java.util.ArrayList;
import java.util.Arrays;
import java.util.Collections;
import java.util.HashSet;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Set;

/**
 * One knowledge edit, the same record as mobiedit.requests.EditRequest: make the model complete
 * {@link #rewritePrompt()} with {@link #targetNew}.
 *
 * <p>Invariants (checked on construction, errors name the field): {@code prompt} holds exactly
 * one "{}" (the subject slot); {@code subject} non-blank; targets non-empty without surrounding
 * whitespace; prompt lists non-blank; one clean answer per neighbourhood prompt.
 * {@link #fromForm} accepts what the edit screen (and {@code mobiedit edit} on the command line)
 * accepts: a prompt with one "{}" or a plain prompt that contains the subject.
 */
public final class EditRequest {
    public static final String SLOT = "{}";
    /** Keys of the JSON form (journal "request" field), as in EditRequest.to_dict. */
    public static final List<String> KEYS = Collections.unmodifiableList(Arrays.asList(
        "case_id", "prompt", "subject", "target_new", "target_true", "paraphrase_prompts",
        "neighborhood_prompts", "neighborhood_answers", "source"));
    private static final String ANSWER_FIX =
        "give the answer text without surrounding spaces (tokenisation adds the space)";

    public final String caseId;
    /** Template with exactly one "{}". */
    public final String prompt;
    public final String subject;
    public final String targetNew;
    /** May be null. */
    public final String targetTrue;
    public final List<String> paraphrasePrompts;
    public final List<String> neighborhoodPrompts;
    public final List<String> neighborhoodAnswers;
    public final String source;

    /** Validating constructor; lists are copied. */
    public EditRequest(String caseId, String prompt, String subject, String targetNew,
            String targetTrue, List<String> paraphrasePrompts, List<String> neighborhoodPrompts,
            List<String> neighborhoodAnswers, String source) {
        this.caseId = caseId;
        this.prompt = prompt;
        this.subject = subject;
        this.targetNew = targetNew;
        this.targetTrue = targetTrue;
        this.paraphrasePrompts = copy(paraphrasePrompts);
        this.neighborhoodPrompts = copy(neighborhoodPrompts);
        this.neighborhoodAnswers = copy(neighborhoodAnswers);
        this.source = source;
        validate();
    }

    /**
     * The request typed into the edit screen. {@code prompt} is a template with one "{}" or a
     * plain prompt containing the subject (verbatim, else case-insensitively as a whole word; the
     * subject then takes the prompt's spelling). Errors name the form field.
     */
    public static EditRequest fromForm(String subject, String prompt, String newAnswer) {
        String[][] fields = {{"Subject", subject}, {"Prompt", prompt}, {"New answer", newAnswer}};
        for (String[] f : fields) {
            if (f[1] == null || f[1].trim().length() == 0) {
                throw new MobiEditError("must be non-empty text", "edit form, field '" + f[0] + "'",
                    "type the " + f[0].toLowerCase(java.util.Locale.ROOT));
            }
        }
        String template;
        String subj = subject;
        int slots = count(prompt, SLOT);
        if (slots == 1) {
            template = prompt;
        } else {
            String[] found = slots == 0 ? slot(prompt, subject) : null;
            if (found == null) {
                throw new MobiEditError("must contain the subject '" + subject
                    + "' or exactly one '{}' slot", "edit form, field 'Prompt'",
                    "write the subject (or one {}) in the prompt, e.g. '{} plays the'");
            }
            template = found[0];
            subj = found[1];
        }
        List<String> none = Collections.emptyList();
        return new EditRequest("app", template, subj, newAnswer.trim(), null, none, none, none,
            "app");
    }

    /** The full prompt: the template with its slot replaced by the subject. */
    public String rewritePrompt() {
        int i = prompt.indexOf(SLOT);
        return prompt.substring(0, i) + subject + prompt.substring(i + SLOT.length());
    }

    /** JSON-ready map of all fields (EditRequest.to_dict). */
    public Map<String, Object> toJson() {
        Map<String, Object> m = new LinkedHashMap<String, Object>();
        m.put("case_id", caseId);
        m.put("prompt", prompt);
        m.put("subject", subject);
        m.put("target_new", targetNew);
        m.put("target_true", targetTrue);
        m.put("paraphrase_prompts", new ArrayList<Object>(paraphrasePrompts));
        m.put("neighborhood_prompts", new ArrayList<Object>(neighborhoodPrompts));
        m.put("neighborhood_answers", new ArrayList<Object>(neighborhoodAnswers));
        m.put("source", source);
        return m;
    }

    /** Rebuild from {@link #toJson()} output; exactly the keys {@link #KEYS} are required. */
    public static EditRequest fromJson(Map<String, Object> m, String where) {
        Set<String> want = new HashSet<String>(KEYS);
        if (!m.keySet().equals(want)) {
            throw new MobiEditError("request has keys " + m.keySet(), where,
                "give exactly the keys " + KEYS);
        }
        try {
            return new EditRequest(str(m, "case_id"), str(m, "prompt"), str(m, "subject"),
                str(m, "target_new"), str(m, "target_true"), strs(m, "paraphrase_prompts"),
                strs(m, "neighborhood_prompts"), strs(m, "neighborhood_answers"),
                str(m, "source"));
        } catch (ClassCastException e) {
            throw new MobiEditError("a field has the wrong JSON type", where,
                "texts must be strings, prompt lists arrays of strings", e);
        }
    }

    // ------------------------------------------------------------------ validation

    private void validate() {
        String[] p = problem();
        if (p != null) {
            String shown = p[1].length() > 300 ? p[1].substring(0, 300) : p[1];
            throw new MobiEditError("invalid value " + shown,
                "request '" + caseId + "', field '" + p[0] + "'", p[2]);
        }
    }

    /** (field, value, fix) of the first violated invariant, or null. */
    private String[] problem() {
        if (!clean(caseId)) {
            return new String[] {"case_id", repr(caseId), "give each request a non-empty id"};
        }
        if (prompt == null || count(prompt, SLOT) != 1) {
            return new String[] {"prompt", repr(prompt), "write the prompt as a template with "
                + "exactly one {} for the subject, e.g. '{} plays the'"};
        }
        if (subject == null || subject.trim().length() == 0) {
            return new String[] {"subject", repr(subject), "give the subject"};
        }
        if (!clean(targetNew)) {
            return new String[] {"target_new", repr(targetNew), ANSWER_FIX};
        }
        if (targetTrue != null && !clean(targetTrue)) {
            return new String[] {"target_true", repr(targetTrue), ANSWER_FIX};
        }
        if (!clean(source)) {
            return new String[] {"source", repr(source), "name the format, e.g. counterfact_rome"};
        }
        String[] names = {"paraphrase_prompts", "neighborhood_prompts"};
        List<List<String>> lists = Arrays.asList(paraphrasePrompts, neighborhoodPrompts);
        for (int i = 0; i < 2; i++) {
            for (String s : lists.get(i)) {
                if (s == null || s.trim().length() == 0) {
                    return new String[] {names[i], lists.get(i).toString(),
                        "give a list of non-empty prompts"};
                }
            }
        }
        boolean ok = neighborhoodAnswers.size() == neighborhoodPrompts.size();
        for (String a : neighborhoodAnswers) {
            ok &= clean(a);
        }
        if (!ok) {
            return new String[] {"neighborhood_answers", neighborhoodAnswers.toString(),
                "give one clean answer per neighborhood prompt"};
        }
        return null;
    }

    /**
     * (template, subject as spelt in prompt): the subject's first occurrence becomes "{}".
     * Verbatim first (ROME's rule); else a case-insensitive whole-word match; null if neither.
     */
    static String[] slot(String prompt, String subject) {
        if (subject.length() == 0) {
            return null;
        }
        int at = prompt.indexOf(subject);
        if (at < 0) {
            at = wordMatch(prompt, subject);
            if (at < 0) {
                return null;
            }
        }
        int end = at + subject.length();
        return new String[] {prompt.substring(0, at) + SLOT + prompt.substring(end),
            prompt.substring(at, end)};
    }

    /** First case-insensitive occurrence not inside a word (Python's (?<!\w)...(?!\w)). */
    private static int wordMatch(String text, String word) {
        int n = word.length();
        for (int i = 0; i + n <= text.length(); i++) {
            if (text.regionMatches(true, i, word, 0, n)
                    && (i == 0 || !isWordChar(text.charAt(i - 1)))
                    && (i + n == text.length() || !isWordChar(text.charAt(i + n)))) {
                return i;
            }
        }
        return -1;
    }

    private static boolean isWordChar(char c) {
        return c == '_' || Character.isLetterOrDigit(c);
    }

    static int count(String s, String sub) {
        int n = 0;
        int i = s.indexOf(sub);
        while (i >= 0) {
            n++;
            i = s.indexOf(sub, i + sub.length());
        }
        return n;
    }

    private static boolean clean(String s) {
        return s != null && s.length() > 0 && s.equals(s.trim());
    }

    private static String repr(String s) {
        return s == null ? "None" : "'" + s + "'";
    }

    private static List<String> copy(List<String> l) {
        return Collections.unmodifiableList(new ArrayList<String>(l == null
            ? Collections.<String>emptyList() : l));
    }

    private static String str(Map<String, Object> m, String k) {
        return (String) m.get(k);
    }

    @SuppressWarnings("unchecked")
    private static List<String> strs(Map<String, Object> m, String k) {
        List<Object> l = (List<Object>) m.get(k);
        List<String> out = new ArrayList<String>();
        for (Object o : l) {
            out.add((String) o);
        }
        return out;
    }
}
