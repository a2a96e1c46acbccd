/* The lists that the command line and the model read from one table each: presets in --help and
 * in the error for an unknown one, the fused layer's default budget as --logits-mb's default, the
 * output layer's paths named in plain words, and the parameter table's whole-model tensors. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/err.h"
#include "kernels/output_kind.h"
#include "model/gpt.h"
#include "tests/test.h"
#include "tests/test_util.h"

/* The help line of one flag (malloc'ed), or NULL. */
static char *help_line(const char *help, const char *flag) {
    const char *at = strstr(help, flag);
    if (!at) return NULL;
    const char *end = strchr(at, '\n');
    size_t n = end ? (size_t)(end - at) : strlen(at);
    char *line = malloc(n + 1);
    memcpy(line, at, n);
    line[n] = '\0';
    return line;
}

TEST(the_preset_help_and_error_list_every_preset_of_the_table) {
    char *help = NULL, *err = NULL;
    CHECK(run_train("--help", &help) == 0, "--help failed");
    CHECK(run_train("-e d99", &err) == 2, "an unknown preset must be a usage error");
    char *line = help ? help_line(help, "--preset") : NULL;
    REQUIRE(line && err, "no --help line for --preset, or no error");
    for (const GPTPreset *p = gpt_presets; p->name; p++) {
        char shown[64];
        if (p->note)
            snprintf(shown, sizeof shown, "%s (%s)", p->name, p->note);
        else
            snprintf(shown, sizeof shown, "%s", p->name);
        CHECK(strstr(line, shown), "--help's preset line lacks '%s': %s", shown, line);
        CHECK(strstr(err, shown), "the unknown-preset error lacks '%s': %s", shown, err);
    }
    CHECK(strstr(line, "tiny, d6, d12 (GPT-2 124M), d24, d36, d48"), "presets out of table order: %s", line);
    free(line);
    free(help);
    free(err);
}

TEST(the_logits_mb_default_is_the_fused_layers_default_budget) {
    char *help = NULL;
    CHECK(run_train("--help", &help) == 0, "--help failed");
    char *line = help ? help_line(help, "--logits-mb") : NULL;
    REQUIRE(line, "no --help line for --logits-mb");
    char shown[32];
    snprintf(shown, sizeof shown, "[%d]", OUTPUT_FUSED_DEFAULT_BUDGET_MIB);
    CHECK(strstr(line, shown), "--logits-mb's default is not %s: %s", shown, line);
    CHECK(OUTPUT_FUSED_DEFAULT_BUDGET == (size_t)OUTPUT_FUSED_DEFAULT_BUDGET_MIB << 20, "budget and MiB differ");
    free(line);
    free(help);
}

TEST(the_help_names_the_fused_layers_paths_chunked_and_streaming_not_by_gemm_counts) {
    char *help = NULL;
    CHECK(run_train("--help", &help) == 0, "--help failed");
    char *line = help ? help_line(help, "--logits-mb") : NULL;
    REQUIRE(line, "no --help line for --logits-mb");
    CHECK(strstr(line, "chunked") && strstr(line, "streaming"), "--logits-mb's help lacks the two paths: %s", line);
    CHECK(!strstr(help, "3G") && !strstr(help, "4G"), "--help speaks of 3G/4G: %s", line);
    free(line);
    free(help);
}

TEST(the_parameter_table_holds_four_whole_model_tensors_and_every_layers_own) {
    GPTConfig cfg = {.num_layers = 3, .num_heads = 2, .dim = 128, .max_seq_len = 64, .vocab_size = 1000};
    gpt_config_finish(&cfg);
    ParamTable t;
    char err[ERR_LEN];
    REQUIRE(param_table_build(&t, &cfg, err) == 0, "%s", err);
    CHECK(NUM_WHOLE_ROLES == 4, "whole-model roles: %d, expected wte, wpe, ln_f weight and bias", NUM_WHOLE_ROLES);
    CHECK(t.count == NUM_WHOLE_ROLES + 3 * NUM_LAYER_ROLES, "table count %d", t.count);
    int whole = 0;
    for (int i = 0; i < t.count; i++) whole += t.params[i].layer < 0;
    CHECK(whole == NUM_WHOLE_ROLES, "%d tensors outside the layers", whole);
    const ParamRole roles[] = {ROLE_WTE, ROLE_WPE, ROLE_LNF_W, ROLE_LNF_B};
    const char *names[] = {"transformer.wte.weight", "transformer.wpe.weight", "transformer.ln_f.weight",
                           "transformer.ln_f.bias"};
    for (int i = 0; i < 4; i++)
        CHECK(strcmp(param_whole(&t, roles[i])->name, names[i]) == 0, "role %d is %s", (int)roles[i],
              param_whole(&t, roles[i])->name);
    param_table_free(&t);
}
