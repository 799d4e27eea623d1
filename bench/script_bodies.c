/* script_bodies.c - prints the Lua scripts redlockd sends, as the daemon
 * builds them (src/masters/scripts.c, src/masters/master_script.c), one JSON object:
 * {"acquire": body, "release": body, "group": body, "group_fn": {name: n}}.
 * bench/group_cost.py reads it, so what it measures is what runs. */
#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>

#include "masters/masters.h"

int main(void)
{
    scripts_init();
    const mscript *const all[] = {&script_acquire, &script_settle, &script_extend, &script_inspect,
                                  &script_release, &script_proclaim, &script_sem_limit, &script_publish};
    cJSON *o = cJSON_CreateObject(), *fn = cJSON_CreateObject();
    if (!o || !fn)
        return 1;
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) {
        cJSON_AddStringToObject(o, all[i]->name, all[i]->body);
        cJSON_AddNumberToObject(fn, all[i]->name, all[i]->group_fn);
    }
    cJSON_AddStringToObject(o, "group", script_group.body);
    cJSON_AddItemToObject(o, "group_fn", fn);
    char *text = cJSON_Print(o);
    if (!text)
        return 1;
    puts(text);
    free(text);
    cJSON_Delete(o);
    return 0;
}
