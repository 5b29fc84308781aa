package dev.mobiedit.demo.core;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import org.junit.jupiter.api.Test;

/** ChatML rendering against transformers' apply_chat_template (fixtures/smollm2/chat_cases.json). */
class ChatTemplateTest {
    @Test
    @SuppressWarnings("unchecked")
    void rendersSmolLM2ConversationsLikeTransformers() throws Exception {
        ChatTemplate t = ChatTemplate.parse(SmolLM2Fixtures.text("chat_template.jinja"), "chat_template.jinja");
        assertEquals("You are a helpful AI assistant named SmolLM, trained by Hugging Face", t.defaultSystem);
        ByteLevelBpe tok = SmolLM2Fixtures.tokenizer();
        List<Object> cases = (List<Object>) Json.parse(SmolLM2Fixtures.text("chat_cases.json"), "chat_cases");
        assertTrue(cases.size() >= 5);
        for (Object o : cases) {
            Map<String, Object> c = (Map<String, Object>) o;
            List<ChatTemplate.Message> msgs = new ArrayList<ChatTemplate.Message>();
            for (Object m : (List<Object>) c.get("messages")) {
                Map<String, Object> mm = (Map<String, Object>) m;
                msgs.add(new ChatTemplate.Message((String) mm.get("role"), (String) mm.get("content")));
            }
            String text = t.render(msgs, (Boolean) c.get("add_generation_prompt"));
            assertEquals(c.get("text"), text);
            assertArrayEquals(ByteLevelBpeTest.ints(c.get("ids")), tok.encode(text, false), "ids of " + text);
        }
        assertEquals(t.render(java.util.Collections.singletonList(new ChatTemplate.Message("user", "Hi")), true),
            t.userPrompt("Hi"));
    }

    @Test
    void readsAnEscapedDefaultSystemTurnAndTemplatesWithoutOne() {
        String escaped = "{% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}"
            + "{{ '<|im_start|>system\\nYou are \\'helpful\\'.<|im_end|>\\n' }}{% endif %}"
            + "{{'<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n'}}"
            + "{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}";
        ChatTemplate t = ChatTemplate.parse(escaped, "t");
        assertEquals("You are 'helpful'.", t.defaultSystem);
        assertEquals("<|im_start|>system\nYou are 'helpful'.<|im_end|>\n<|im_start|>user\nQ<|im_end|>\n"
            + "<|im_start|>assistant\n", t.userPrompt("Q"));
        String bare = escaped.replaceAll("\\{% if loop.first.*?\\{% endif %\\}", "");
        ChatTemplate plain = ChatTemplate.parse(bare, "t");
        assertNull(plain.defaultSystem);
        assertEquals("<|im_start|>user\nQ<|im_end|>\n<|im_start|>assistant\n", plain.userPrompt("Q"));
    }

    @Test
    void refusesTemplatesItCannotRenderFaithfully() {
        String llama3 = "{% for message in messages %}{{ '<|start_header_id|>' + message['role'] + "
            + "'<|end_header_id|>\\n\\n' + message['content'] + '<|eot_id|>' }}{% endfor %}";
        MobiEditError e = assertThrows(MobiEditError.class, () -> ChatTemplate.parse(llama3, "chat_template.jinja"));
        assertTrue(e.getMessage().contains("not a ChatML template"), e.getMessage());
        String withTools = "{% if tools %}x{% endif %}{% for message in messages %}"
            + "{{'<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n'}}"
            + "{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}";
        assertTrue(assertThrows(MobiEditError.class, () -> ChatTemplate.parse(withTools, "t")).getMessage()
            .contains("tools"));
    }
}
