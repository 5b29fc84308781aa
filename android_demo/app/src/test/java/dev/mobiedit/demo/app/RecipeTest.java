package dev.mobiedit.demo.app;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import dev.mobiedit.demo.core.EditRequest;
import dev.mobiedit.demo.core.Fixtures;
import dev.mobiedit.demo.core.Json;
import dev.mobiedit.demo.core.Manifest;
import dev.mobiedit.demo.core.ManifestReader;
import dev.mobiedit.demo.core.MobiEditError;
import dev.mobiedit.demo.core.Recipe;
import dev.mobiedit.demo.jni.EngineConfig;
import dev.mobiedit.demo.jni.Jni;
import java.io.File;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.Map;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

/**
 * The edit recipe comes from the manifest ("recipe", written by export/recipe.py): the app
 * searches and judges with it, falls back to the shipped recipe when a manifest has none, and
 * refuses a malformed one with the field named.
 */
class RecipeTest {
    @BeforeAll
    static void lib() {
        Jni.require();
    }

    @SuppressWarnings("unchecked")
    static Map<String, Object> zo(Map<String, Object> m) {
        return (Map<String, Object>) ((Map<String, Object>) m.get("recipe")).get("zo");
    }

    @SuppressWarnings("unchecked")
    static Map<String, Object> success(Map<String, Object> m) {
        return (Map<String, Object>) ((Map<String, Object>) m.get("recipe")).get("success");
    }

    /** The manifest map with a non-default recipe: lr 0.3, 8 directions, 5 steps, fraction 0.5. */
    static Map<String, Object> custom() {
        Map<String, Object> m = Fixtures.manifestMap();
        zo(m).put("lr", 0.3);
        zo(m).put("n_dirs", 8L);
        zo(m).put("max_steps", 5L);
        zo(m).put("seed", 9L);
        success(m).put("fraction", 0.5);
        return m;
    }

    /** Parse {@code m} with its program file listed (files are checked before the recipe). */
    @SuppressWarnings("unchecked")
    static Manifest parse(Map<String, Object> m) {
        ((Map<String, Object>) m.get("files")).put("model.pte", Fixtures.map("sha256",
            String.join("", java.util.Collections.nCopies(64, "0")), "bytes", 1L));
        return ManifestReader.parse(Json.write(m, true));
    }

    /** Every field of {@code got} equals {@code want}'s (fromManifest aside). */
    static void assertSameRecipe(Recipe want, Recipe got) {
        Object[][] pairs = {{want.estimator, got.estimator}, {want.nDirs, got.nDirs}, {want.h, got.h},
            {want.optimizer, got.optimizer}, {want.lr, got.lr}, {want.lrMin, got.lrMin},
            {want.lrSchedule, got.lrSchedule}, {want.momentum, got.momentum}, {want.beta1, got.beta1},
            {want.beta2, got.beta2}, {want.adamEps, got.adamEps}, {want.maxSteps, got.maxSteps},
            {want.maxEvals, got.maxEvals}, {want.checkEvery, got.checkEvery}, {want.lossTol, got.lossTol},
            {want.patience, got.patience}, {want.minRelImprove, got.minRelImprove}, {want.seed, got.seed},
            {want.directions, got.directions}, {want.normalise, got.normalise},
            {want.successFraction, got.successFraction}, {want.successNll, got.successNll},
            {want.ladder, got.ladder}, {want.ladderFromEdits, got.ladderFromEdits}};
        for (int i = 0; i < pairs.length; i++) {
            assertEquals(pairs[i][0], pairs[i][1], "field " + i + " of " + got);
        }
    }

    @Test
    void theAppSearchesAndJudgesWithTheManifestsRecipe(@TempDir Path tmp) throws Exception {
        Manifest m = parse(custom());
        Recipe r = m.recipe;
        assertTrue(r.fromManifest);
        assertEquals(0.3, r.lr);
        assertEquals(8, r.nDirs);
        assertEquals(0.5, r.successFraction);
        EngineConfig c = EditRunner.forBundle(m, m.dOut());
        assertEquals(0.3, c.lr);
        assertEquals(8, c.nDirs);
        assertEquals(9, c.rows());
        assertEquals(5, c.maxSteps);
        assertEquals(9, c.seed);
        assertEquals(4.0 * Math.sqrt(Fixtures.D_OUT), c.maxNorm, 1e-12);
        assertEquals(0.5, SuccessCriterion.of(r).fraction);

        // a bundle on disk whose manifest has that recipe: BundleSession.edit uses it
        File dir = tmp.resolve("bundle").toFile();
        Map<String, Object> written = Fixtures.writeBundle(dir, Fixtures.baseWeight());
        written.put("recipe", custom().get("recipe"));  // the manifest is not a checksummed file
        Files.write(new File(dir, "manifest.json").toPath(), Json.write(written, true).getBytes("UTF-8"));
        BundleSessionTest.FakeRuntime rt = new BundleSessionTest.FakeRuntime();
        BundleSession s = BundleSession.open(dir, (d, mm) -> rt, null);
        assertEquals(0.3, s.recipe().lr);
        EditRequest req = EditRequest.fromForm("Danielle Darrieux", "The mother tongue of {} is", "English");
        EditOutcome o = s.edit(req, null, null);
        assertEquals(0.3, o.config.lr);
        assertEquals(8, o.config.nDirs);
        assertEquals(5, o.config.maxSteps);
        assertEquals(0.5, o.success.fraction);
        assertTrue(o.steps <= 5, "max_steps 5, ran " + o.steps);
        assertTrue(o.evals >= 9 * o.steps && o.evals <= 10 * o.steps + 1, "9 rows per step: " + o.evals);
        Map<String, Object> cfg = o.configJson();
        Map<?, ?> zo = (Map<?, ?>) cfg.get("zo");
        assertEquals(0.3, zo.get("lr"));
        assertEquals(8L, zo.get("n_dirs"));
        assertEquals(9L, zo.get("seed"));
        assertEquals("iid", zo.get("directions"));
        assertEquals("spread", zo.get("normalise"));
        assertEquals(0.5, cfg.get("success_fraction"));
        s.close();
    }

    /**
     * An optional {@code recipe.zo} choice: {@code value} reaches the recipe ({@code ofRecipe}) and
     * the engine ({@code ofEngine}, as {@code code}); absent (a bundle exported before the field was
     * written) it reads {@code absent} ({@code absentCode}); {@code bad} and a number are refused.
     */
    private static void optionalChoice(String field, String value, int code, String absent, int absentCode,
            String bad, java.util.function.Function<Recipe, String> ofRecipe,
            java.util.function.ToIntFunction<EngineConfig> ofEngine) {
        Map<String, Object> map = Fixtures.manifestMap();
        zo(map).put(field, value);
        Manifest m = parse(map);
        assertEquals(value, ofRecipe.apply(m.recipe));
        assertTrue(m.recipe.toString().contains(field + "=" + value), m.recipe.toString());
        assertEquals(code, ofEngine.applyAsInt(EditRunner.forBundle(m, m.dOut())));
        zo(map).remove(field);
        Manifest old = parse(map);
        assertEquals(absent, ofRecipe.apply(old.recipe));
        assertEquals(absentCode, ofEngine.applyAsInt(EditRunner.forBundle(old, old.dOut())));
        zo(map).put(field, bad);
        refusedAt(map, "recipe.zo." + field);
        zo(map).put(field, 1L);
        refusedAt(map, "recipe.zo." + field);
    }

    @Test
    void theRecipesDirectionsReachTheEngine() {  // absent: exported before session 24, i.i.d.
        optionalChoice("directions", "coordinates", EngineConfig.DIRECTIONS_COORDINATES, "iid",
            EngineConfig.DIRECTIONS_IID, "sobol", r -> r.directions, c -> c.directions);
    }

    @Test
    void theRecipesNormaliseReachesTheEngineAndTheJournal(@TempDir Path tmp) throws Exception {
        Map<String, Object> map = Fixtures.manifestMap();
        zo(map).put("directions", "coordinates");
        zo(map).put("normalise", "gradient");
        Manifest m = parse(map);
        assertEquals("gradient", m.recipe.normalise);
        assertTrue(m.recipe.toString().contains("normalise=gradient"), m.recipe.toString());
        EngineConfig c = EditRunner.forBundle(m, m.dOut());
        assertEquals(EngineConfig.NORMALISE_GRADIENT, c.normalise);
        assertEquals(EngineConfig.DIRECTIONS_COORDINATES, c.directions);

        // an edit on a bundle with that recipe: the engine runs it, the journal records it
        File dir = tmp.resolve("bundle").toFile();
        Map<String, Object> written = Fixtures.writeBundle(dir, Fixtures.baseWeight());
        Map<String, Object> recipe = custom();
        zo(recipe).put("directions", "coordinates");
        zo(recipe).put("normalise", "gradient");
        written.put("recipe", recipe.get("recipe"));
        Files.write(new File(dir, "manifest.json").toPath(), Json.write(written, true).getBytes("UTF-8"));
        BundleSessionTest.FakeRuntime rt = new BundleSessionTest.FakeRuntime();
        BundleSession s = BundleSession.open(dir, (d, mm) -> rt, null);
        assertEquals("gradient", s.recipe().normalise);
        EditRequest req = EditRequest.fromForm("Danielle Darrieux", "The mother tongue of {} is", "English");
        EditOutcome o = s.edit(req, null, null);
        assertEquals(EngineConfig.NORMALISE_GRADIENT, o.config.normalise);
        assertTrue(o.steps >= 1 && o.steps <= 5, "max_steps 5, ran " + o.steps);
        Map<?, ?> journalZo = (Map<?, ?>) o.configJson().get("zo");
        assertEquals("coordinates", journalZo.get("directions"));
        assertEquals("gradient", journalZo.get("normalise"));
        s.close();

        zo(map).remove("normalise");  // exported before it was written: FZOO's own spread rule
        Manifest old = parse(map);
        assertEquals("spread", old.recipe.normalise);
        assertEquals(EngineConfig.NORMALISE_SPREAD, EditRunner.forBundle(old, old.dOut()).normalise);
        assertEquals("spread", Recipe.shippedFallback(17).normalise);
        zo(map).put("normalise", "hessian");
        refusedAt(map, "recipe.zo.normalise");
        zo(map).put("normalise", 1L);
        refusedAt(map, "recipe.zo.normalise");
        zo(map).put("normalise", "gradient");  // needs fzoo on coordinates
        zo(map).put("directions", "iid");
        MobiEditError e = refusedAt(map, "recipe.zo.normalise");
        assertTrue(e.fix().contains("recipe.zo.directions to coordinates"), e.fix());
        zo(map).remove("directions");  // absent = iid: refused too
        refusedAt(map, "recipe.zo.normalise");
        zo(map).put("directions", "coordinates");
        zo(map).put("estimator", "antithetic");
        refusedAt(map, "recipe.zo.normalise");
    }

    @Test
    void theRecipesCheckAtReachesTheEngine() {  // absent: exported before session 36, after the update
        optionalChoice("check_at", "base", EngineConfig.CHECK_AT_BASE, "update", EngineConfig.CHECK_AT_UPDATE,
            "later", r -> r.checkAt, c -> c.checkAt);
        assertEquals("base", Recipe.shippedFallback(17).checkAt, "as export/recipe.py shipped_recipe");
    }

    @Test
    void aManifestWithoutRecipeGetsTheShippedOne() {
        Map<String, Object> map = Fixtures.manifestMap();
        map.remove("recipe");
        Manifest m = parse(map);
        Recipe r = m.recipe;
        assertFalse(r.fromManifest);
        assertEquals("fzoo", r.estimator);
        assertEquals(16, r.nDirs, "edit_K 17 - 1");
        assertEquals(0.05, r.h);
        assertEquals("adam", r.optimizer);
        assertEquals(0.5, r.lr);
        assertEquals(150, r.maxSteps);
        assertEquals(3000, r.maxEvals);
        assertEquals(1, r.checkEvery);
        assertEquals(0, r.seed);
        assertEquals(0.75, r.successFraction);
        assertEquals(0.5, r.successNll);
        EngineConfig c = EditRunner.forBundle(m, m.dOut());
        assertEquals(17, c.rows());
        assertEquals(0.75, SuccessCriterion.of(r).fraction);
        // the exporter's recipe (Fixtures.recipeMap, as export/recipe.py writes it) is the same
        Recipe exported = parse(Fixtures.manifestMap()).recipe;
        assertTrue(exported.fromManifest);
        assertSameRecipe(r, exported);
    }

    private static MobiEditError refusedAt(Map<String, Object> m, String field) {
        MobiEditError e = assertThrows(MobiEditError.class, () -> parse(m));
        assertTrue(e.getMessage().contains("field '" + field + "'") && e.fix() != null, e.getMessage());
        return e;
    }

    @Test
    @SuppressWarnings("unchecked")
    void aMalformedRecipeIsRefusedNamingTheField() {
        Object[][] cases = {
            {"lr", -0.5, "recipe.zo.lr"}, {"lr", "0.3", "recipe.zo.lr"}, {"n_dirs", 8.0, "recipe.zo.n_dirs"},
            {"n_dirs", 0L, "recipe.zo.n_dirs"}, {"estimator", "adam", "recipe.zo.estimator"},
            {"optimizer", null, "recipe.zo.optimizer"}, {"lr_min", 0.9, "recipe.zo.lr_min"},
            {"beta2", 1.0, "recipe.zo.beta2"}, {"max_evals", 16L, "recipe.zo.max_evals"},
            {"seed", 1e19, "recipe.zo.seed"}, {"max_norm", 1.0, "recipe.zo.max_norm"},
        };
        for (Object[] c : cases) {
            Map<String, Object> m = Fixtures.manifestMap();
            zo(m).put((String) c[0], c[1]);
            refusedAt(m, (String) c[2]);
        }
        Map<String, Object> m = Fixtures.manifestMap();
        zo(m).remove("h");
        refusedAt(m, "recipe.zo.h");
        m = Fixtures.manifestMap();
        success(m).put("fraction", 1.5);
        refusedAt(m, "recipe.success.fraction");
        m = Fixtures.manifestMap();
        success(m).put("nll", 0L);
        refusedAt(m, "recipe.success.nll");
        m = Fixtures.manifestMap();
        m.put("recipe", null);
        refusedAt(m, "recipe");
        m = Fixtures.manifestMap();
        ((Map<String, Object>) m.get("recipe")).remove("success");
        refusedAt(m, "recipe.success");
        m = Fixtures.manifestMap();
        ((Map<String, Object>) m.get("recipe")).put("warm", true);
        refusedAt(m, "recipe.warm");
        m = Fixtures.manifestMap();  // each value in range, the directions' buffer is not
        zo(m).put("n_dirs", 1L << 20);
        zo(m).put("max_evals", 1L << 21);
        Map<String, Object> dims = Fixtures.map("vocab_size", 400L, "hidden_size", 1L << 17,
            "intermediate_size", (long) Fixtures.D_IN, "num_layers", 2L, "num_heads", 2L,
            "num_kv_heads", 2L, "head_dim", 4L, "d_out", 1L << 17);
        m.put("dims", dims);
        refusedAt(m, "recipe.zo.n_dirs");
    }

    @Test
    void stopOnIsReadDefaultedToLoopOrRefusedNamingTheField() {
        for (String stop : new String[] {"loop", "written"}) {  // as export/recipe.py writes it
            Map<String, Object> m = Fixtures.manifestMap();
            success(m).put("stop_on", stop);
            assertEquals(stop, parse(m).recipe.stopOn);
        }
        // absent (bundles exported before it was written): the loop's rule, as then
        Recipe absent = parse(Fixtures.manifestMap()).recipe;
        assertTrue(absent.fromManifest);
        assertEquals(Recipe.STOP_LOOP, absent.stopOn);
        // no recipe at all: the shipped one, which stops where the written edit holds
        Map<String, Object> none = Fixtures.manifestMap();
        none.remove("recipe");
        assertEquals(Recipe.STOP_WRITTEN, parse(none).recipe.stopOn);
        assertEquals(Recipe.STOP_WRITTEN, Recipe.shippedFallback(17).stopOn);
        assertEquals(Arrays.asList("loop", "written"), Recipe.STOP_ON);
        Object[] bad = {"bogus", 3L, 3.0, true, null, "Written", "", new ArrayList<Object>(Arrays.asList("written"))};
        for (Object v : bad) {
            Map<String, Object> m = Fixtures.manifestMap();
            success(m).put("stop_on", v);
            MobiEditError e = assertThrows(MobiEditError.class, () -> parse(m), String.valueOf(v));
            assertTrue(e.getMessage().contains("field 'recipe.success.stop_on'"), e.getMessage());
            assertTrue(e.fix() != null && e.fix().contains("written") && e.fix().contains("loop"), e.fix());
        }
        Map<String, Object> m = Fixtures.manifestMap();  // other unknown success fields stay refused
        success(m).put("stop", "written");
        refusedAt(m, "recipe.success.stop");
    }

    @SuppressWarnings("unchecked")
    static Map<String, Object> ladder(Map<String, Object> m) {
        return (Map<String, Object>) ((Map<String, Object>) m.get("recipe")).get("ladder");
    }

    @Test
    @SuppressWarnings("unchecked")
    void theClampLadderIsReadOrDefaulted() {
        // as the exporter writes it (Fixtures.recipeMap): the defaults, mobiedit/ladder.py's
        Recipe written = parse(Fixtures.manifestMap()).recipe;
        assertEquals(Arrays.asList(0.5, 0.75, 1.0), written.ladder);
        assertEquals(2, written.ladderFromEdits);
        // absent (bundles exported before session 15): the same defaults
        Map<String, Object> m = Fixtures.manifestMap();
        ((Map<String, Object>) m.get("recipe")).remove("ladder");
        Recipe absent = parse(m).recipe;
        assertTrue(absent.fromManifest);
        assertEquals(Recipe.DEFAULT_LADDER, absent.ladder);
        assertEquals(Recipe.DEFAULT_LADDER_FROM_EDITS, absent.ladderFromEdits);
        assertEquals(Arrays.asList(0.5, 0.75, 1.0), Recipe.DEFAULT_LADDER);
        assertEquals(2, Recipe.DEFAULT_LADDER_FROM_EDITS);
        assertEquals(Recipe.DEFAULT_LADDER, Recipe.shippedFallback(17).ladder);
        // a valid one of its own (integers are numbers too), eight rungs at most
        m = Fixtures.manifestMap();
        ladder(m).put("fractions", new ArrayList<Object>(Arrays.asList(0.25, 1L, 2.5)));
        ladder(m).put("from_edits", 5L);
        Recipe own = parse(m).recipe;
        assertEquals(Arrays.asList(0.25, 1.0, 2.5), own.ladder);
        assertEquals(5, own.ladderFromEdits);
        assertThrows(UnsupportedOperationException.class, () -> own.ladder.add(3.0));
        m = Fixtures.manifestMap();
        ladder(m).put("fractions", new ArrayList<Object>(Arrays.asList(0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8)));
        assertEquals(8, parse(m).recipe.ladder.size());
        m = Fixtures.manifestMap();
        ladder(m).put("fractions", new ArrayList<Object>(Arrays.asList(1.0)));
        ladder(m).put("from_edits", 1L);
        assertEquals(Arrays.asList(1.0), parse(m).recipe.ladder);
    }

    @Test
    @SuppressWarnings("unchecked")
    void aMalformedLadderIsRefusedNamingTheField() {
        String f = "recipe.ladder.fractions";
        String e = "recipe.ladder.from_edits";
        Object[][] cases = {
            {"fractions", new ArrayList<Object>(), f},
            {"fractions", new ArrayList<Object>(Arrays.asList(0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9)), f},
            {"fractions", new ArrayList<Object>(Arrays.asList(0.5, 0.5, 1.0)), f},
            {"fractions", new ArrayList<Object>(Arrays.asList(1.0, 0.75)), f},
            {"fractions", new ArrayList<Object>(Arrays.asList(0.0, 1.0)), f},
            {"fractions", new ArrayList<Object>(Arrays.asList(-0.5, 1.0)), f},
            {"fractions", new ArrayList<Object>(Arrays.asList(0.5, "1.0")), f + "[1]"},
            {"fractions", new ArrayList<Object>(Arrays.asList(0.5, true)), f + "[1]"},
            {"fractions", new ArrayList<Object>(Arrays.asList(0.5, null)), f + "[1]"},
            {"fractions", 0.5, f}, {"fractions", "0.5,1.0", f}, {"fractions", null, f},
            {"from_edits", 0L, e}, {"from_edits", -1L, e}, {"from_edits", 2.0, e}, {"from_edits", 1.5, e},
            {"from_edits", "2", e}, {"from_edits", true, e}, {"from_edits", null, e},
        };
        for (Object[] c : cases) {
            Map<String, Object> m = Fixtures.manifestMap();
            ladder(m).put((String) c[0], c[1]);
            refusedAt(m, (String) c[2]);
        }
        Object[][] sections = {{"not an object", new ArrayList<Object>(Arrays.asList(0.5, 1.0))},
            {"a number", 1.0}, {"null", null}};
        for (Object[] c : sections) {
            Map<String, Object> m = Fixtures.manifestMap();
            ((Map<String, Object>) m.get("recipe")).put("ladder", c[1]);
            refusedAt(m, "recipe.ladder");
        }
        Map<String, Object> m = Fixtures.manifestMap();  // 1e400: a JSON number past double's range
        ladder(m).put("fractions", new ArrayList<Object>(Arrays.asList(0.5, 123456.0)));
        parse(m);
        String text = Json.write(m, true).replace("123456.0", "1e400");
        MobiEditError inf = assertThrows(MobiEditError.class, () -> ManifestReader.parse(text));
        assertTrue(inf.getMessage().contains("field '" + f + "[1]'") && inf.getMessage().contains("finite"),
            inf.getMessage());
        m = Fixtures.manifestMap();
        ladder(m).put("warm", false);
        refusedAt(m, "recipe.ladder.warm");
        m = Fixtures.manifestMap();
        ladder(m).remove("fractions");
        refusedAt(m, f);
        m = Fixtures.manifestMap();
        ladder(m).remove("from_edits");
        refusedAt(m, e);
    }

    @SuppressWarnings("unchecked")
    static Map<String, Object> settle(Map<String, Object> m) {
        return (Map<String, Object>) ((Map<String, Object>) m.get("recipe")).get("settle");
    }

    @Test
    @SuppressWarnings("unchecked")
    void theSettlePhaseIsReadDefaultedToOffOrRefusedNamingTheField() {
        // as the exporter writes it by default: off
        Recipe written = parse(Fixtures.manifestMap()).recipe;
        assertEquals(0, written.settle.rounds);
        // absent (bundles exported before session 47), and the shipped fallback: off
        Map<String, Object> m = Fixtures.manifestMap();
        ((Map<String, Object>) m.get("recipe")).remove("settle");
        assertEquals(Recipe.Settle.OFF, parse(m).recipe.settle);
        assertEquals(Recipe.Settle.OFF, Recipe.shippedFallback(17).settle);
        // a profile's (export/recipe.py with_settle)
        m = Fixtures.manifestMap();
        settle(m).put("rounds", 3L);
        settle(m).put("shrink", 0.7);
        settle(m).put("steps", 12L);
        Recipe.Settle own = parse(m).recipe.settle;
        assertEquals(3, own.rounds);
        assertEquals(0.7, own.shrink);
        assertEquals(12, own.steps);
        String r = "recipe.settle.rounds";
        String sh = "recipe.settle.shrink";
        String st = "recipe.settle.steps";
        Object[][] cases = {
            {"rounds", -1L, r}, {"rounds", 101L, r}, {"rounds", 2.0, r}, {"rounds", true, r}, {"rounds", null, r},
            {"shrink", 1.0, sh}, {"shrink", 0L, sh}, {"shrink", -0.5, sh}, {"shrink", "0.8", sh},
            {"steps", 0.5, st}, {"steps", 10001L, st}, {"steps", -1L, st},
        };
        for (Object[] c : cases) {
            m = Fixtures.manifestMap();
            settle(m).put((String) c[0], c[1]);
            refusedAt(m, (String) c[2]);
        }
        m = Fixtures.manifestMap();  // a phase with rounds needs a step a round
        settle(m).put("rounds", 2L);
        settle(m).put("steps", 0L);
        refusedAt(m, st);
        m = Fixtures.manifestMap();
        settle(m).put("grow", 2L);
        refusedAt(m, "recipe.settle.grow");
        m = Fixtures.manifestMap();
        settle(m).remove("shrink");
        refusedAt(m, sh);
        m = Fixtures.manifestMap();
        ((Map<String, Object>) m.get("recipe")).put("settle", 3L);
        refusedAt(m, "recipe.settle");
    }
}
