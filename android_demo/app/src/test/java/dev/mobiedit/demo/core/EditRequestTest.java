package dev.mobiedit.demo.core;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.util.Arrays;
import java.util.Collections;
import java.util.List;
import java.util.Map;
import org.junit.jupiter.api.Test;

class EditRequestTest {
    @Test
    void templateWithOneSlot() {
        EditRequest r = EditRequest.fromForm("Toko Yasuda", "{} plays the", " piano ");
        assertEquals("{} plays the", r.prompt);
        assertEquals("piano", r.targetNew);
        assertEquals("Toko Yasuda plays the", r.rewritePrompt());
        assertNull(r.targetTrue);
    }

    @Test
    void plainPromptContainingTheSubject() {
        EditRequest r = EditRequest.fromForm("Danielle Darrieux", "The mother tongue of Danielle Darrieux is", "English");
        assertEquals("The mother tongue of {} is", r.prompt);
        assertEquals("Danielle Darrieux", r.subject);
    }

    @Test
    void caseInsensitiveWholeWordMatchTakesThePromptsSpelling() {
        EditRequest r = EditRequest.fromForm("paris", "Paris is the capital of", "Italy");
        assertEquals("{} is the capital of", r.prompt);
        assertEquals("Paris", r.subject);
        assertEquals("Paris is the capital of", r.rewritePrompt());
        // "paris" inside "Parisian" is not a whole word
        assertThrows(MobiEditError.class, () -> EditRequest.fromForm("paris", "Parisian food is", "good"));
    }

    @Test
    void errorsNameTheFormField() {
        MobiEditError e = assertThrows(MobiEditError.class, () -> EditRequest.fromForm("", "{} plays", "x"));
        assertEquals("edit form, field 'Subject'", e.where());
        e = assertThrows(MobiEditError.class, () -> EditRequest.fromForm("A", "{} plays", "  "));
        assertEquals("edit form, field 'New answer'", e.where());
        e = assertThrows(MobiEditError.class, () -> EditRequest.fromForm("Messi", "He plays the", "piano"));
        assertEquals("edit form, field 'Prompt'", e.where());
        assertTrue(e.fix().contains("{}"));
        e = assertThrows(MobiEditError.class, () -> EditRequest.fromForm("Messi", "{} and {} play", "x"));
        assertEquals("edit form, field 'Prompt'", e.where());
    }

    @Test
    void constructorChecksTheInvariantsLikePython() {
        List<String> none = Collections.emptyList();
        MobiEditError e = assertThrows(MobiEditError.class,
            () -> new EditRequest("1", "{} x", "S", " padded", null, none, none, none, "cli"));
        assertEquals("request '1', field 'target_new'", e.where());
        e = assertThrows(MobiEditError.class,
            () -> new EditRequest("1", "{} x", "S", "t", null, none, Arrays.asList("p"), none, "cli"));
        assertEquals("request '1', field 'neighborhood_answers'", e.where());
        e = assertThrows(MobiEditError.class,
            () -> new EditRequest("1", "no slot", "S", "t", null, none, none, none, "cli"));
        assertEquals("request '1', field 'prompt'", e.where());
    }

    @Test
    void jsonRoundTripHasPythonsKeys() {
        EditRequest r = EditRequest.fromForm("Toko Yasuda", "{} plays the", "piano");
        Map<String, Object> m = r.toJson();
        assertEquals(EditRequest.KEYS, new java.util.ArrayList<>(m.keySet()));
        Map<String, Object> back = Json.parseObject(Json.write(m, true), "t");
        EditRequest r2 = EditRequest.fromJson(back, "t");
        assertEquals(r.rewritePrompt(), r2.rewritePrompt());
        back.remove("source");
        assertThrows(MobiEditError.class, () -> EditRequest.fromJson(back, "t"));
    }
}
