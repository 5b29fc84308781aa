package dev.mobiedit.demo.core;

import java.util.List;
import java.util.regex.Matcher;
import java.util.regex.Pattern;

/**
 * A minimal renderer of ChatML chat templates (SmolLM2-Instruct's, Qwen's): each message becomes
 * {@code <|im_start|>ROLE\nCONTENT<|im_end|>\n}; when the first message is not a system message
 * and the template has a default system turn ({@code '<|im_start|>system\n...<|im_end|>\n'} under
 * {@code messages[0]['role'] != 'system'}), that turn comes first; the generation prompt is
 * {@code <|im_start|>assistant\n}. This is not a jinja engine: {@link #parse} refuses templates it
 * does not recognise as ChatML (the app then prompts with plain text), so it never renders a
 * template differently from transformers' apply_chat_template without saying so. Checked against
 * transformers in the JVM tests (fixture made by tools/make_smollm2_tokenizer_fixture.py).
 */
public final class ChatTemplate {
    public static final String START = "<|im_start|>";
    public static final String END = "<|im_end|>";
    /** The per-message expression every supported template contains. */
    private static final Pattern MESSAGE = Pattern.compile(
        "'<\\|im_start\\|>'\\s*\\+\\s*message\\['role'\\]\\s*\\+\\s*'(?:\\\\n|\\n)'\\s*\\+\\s*"
            + "message\\['content'\\]\\s*\\+\\s*'<\\|im_end\\|>'\\s*\\+\\s*'(?:\\\\n|\\n)'");
    /** The default system turn: a quoted literal printed when messages[0] is not a system one. */
    private static final Pattern DEFAULT_SYSTEM = Pattern.compile(
        "messages\\[0\\]\\['role'\\]\\s*!=\\s*'system'\\s*%\\}\\s*\\{\\{\\s*'<\\|im_start\\|>system"
            + "(?:\\\\n|\\n)((?:[^'\\\\]|\\\\.)*)<\\|im_end\\|>(?:\\\\n|\\n)'\\s*\\}\\}", Pattern.DOTALL);
    private static final Pattern GENERATION = Pattern.compile(
        "add_generation_prompt\\s*%\\}\\s*\\{\\{\\s*'<\\|im_start\\|>assistant(?:\\\\n|\\n)'\\s*\\}\\}");

    /** One chat message. */
    public static final class Message {
        public final String role;
        public final String content;

        public Message(String role, String content) {
            this.role = role;
            this.content = content;
        }
    }

    /** The default system message, or null when the template has none. */
    public final String defaultSystem;

    private ChatTemplate(String defaultSystem) {
        this.defaultSystem = defaultSystem;
    }

    /**
     * Parse a template's text (the bundle's chat_template.jinja); {@code where} names the file in
     * errors. Refuses anything but the ChatML shape described in the class comment.
     */
    public static ChatTemplate parse(String template, String where) {
        String fix = "answer with plain prompts (this app renders ChatML templates only)";
        if (!MESSAGE.matcher(template).find()) {
            throw new MobiEditError("not a ChatML template (no '<|im_start|>' + role + content"
                + " + '<|im_end|>' per message)", where, fix);
        }
        if (!GENERATION.matcher(template).find()) {
            throw new MobiEditError("no '<|im_start|>assistant' generation prompt", where, fix);
        }
        if (template.contains("tools") || template.contains("{% set") || template.contains("namespace(")) {
            throw new MobiEditError("uses tools or variables this renderer does not implement", where, fix);
        }
        Matcher sys = DEFAULT_SYSTEM.matcher(template);
        return new ChatTemplate(sys.find() ? unescape(sys.group(1)) : null);
    }

    /** The conversation as the model sees it (what apply_chat_template(tokenize=False) gives). */
    public String render(List<Message> messages, boolean addGenerationPrompt) {
        StringBuilder out = new StringBuilder();
        for (int i = 0; i < messages.size(); i++) {
            Message m = messages.get(i);
            if (i == 0 && defaultSystem != null && !"system".equals(m.role)) {
                turn(out, "system", defaultSystem);
            }
            turn(out, m.role, m.content);
        }
        if (addGenerationPrompt) {
            out.append(START).append("assistant\n");
        }
        return out.toString();
    }

    /** One user turn followed by the generation prompt. */
    public String userPrompt(String text) {
        return render(java.util.Collections.singletonList(new Message("user", text)), true);
    }

    private static void turn(StringBuilder out, String role, String content) {
        out.append(START).append(role).append('\n').append(content).append(END).append('\n');
    }

    /** Jinja single-quoted string escapes: \n, \t, \', \\ (a real newline stays a newline). */
    private static String unescape(String s) {
        StringBuilder out = new StringBuilder(s.length());
        for (int i = 0; i < s.length(); i++) {
            char c = s.charAt(i);
            if (c == '\\' && i + 1 < s.length()) {
                char n = s.charAt(++i);
                out.append(n == 'n' ? '\n' : n == 't' ? '\t' : n);
            } else {
                out.append(c);
            }
        }
        return out.toString();
    }
}
