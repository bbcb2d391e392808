#!/usr/bin/env python3
"""random_conversations.py SEED N OUT.json: N random chat requests in the shape of
tests/chat/jinja_corpus.json: an optional system or developer turn, 1-5 user turns, assistant
turns with text, no content, text parts, think tags, reasoning_content or tool calls (arguments
as an object or a JSON string) followed by tool results, now and then a trailing turn of any
role, tools or none, the generation prompt or not, and some of the templates' knobs.
tests/integration/test_jinja_templates.sh renders them with every template, by the Jinja
engine and by @huggingface/jinja. The same SEED gives the same requests."""
import json
import random
import sys

random.seed(int(sys.argv[1]))
N = int(sys.argv[2])
texts=["Hello!","  padded  ","", "multi\nline\ntext","<think>\nhmm\n</think>\n\nAnswer.","Grüße 🙂","{\"json\": true}","<tool_response>x</tool_response>","a  b","\n"]
tools=[{"type":"function","function":{"name":"get_weather","description":"Get weather.","parameters":{"type":"object","properties":{"location":{"type":"string","description":"City"},"days":{"type":"integer","description":"Days"}},"required":["location"]}}},
 {"type":"function","function":{"name":"noop","description":"Nothing.","parameters":{"type":"object","properties":{}}}}]
def content():
    r=random.random()
    if r<0.7: return random.choice(texts)
    if r<0.8: return None
    return [{"type":"text","text":random.choice(texts)} for _ in range(random.randint(1,3))]
def call(i):
    args={"location":random.choice(["Paris","Oslo"]),"days":random.randint(1,3)}
    return {"id":"call%d"%i if random.random()<0.5 else "abcdefghi","type":"function","function":{"name":"get_weather","arguments":args if random.random()<0.6 else json.dumps(args)}}
def conv():
    msgs=[]
    if random.random()<0.5: msgs.append({"role":random.choice(["system","system","developer"]),"content":content()})
    for t in range(random.randint(1,5)):
        msgs.append({"role":"user","content":content()})
        if random.random()<0.8:
            a={"role":"assistant","content":content()}
            if random.random()<0.3:
                a["tool_calls"]=[call(k) for k in range(random.randint(1,2))]
                msgs.append(a)
                for c in a["tool_calls"]:
                    msgs.append({"role":"tool","tool_call_id":c["id"],"name":"get_weather","content":random.choice(texts)})
                if random.random()<0.5: msgs.append({"role":"assistant","content":content()})
                continue
            if random.random()<0.3: a["reasoning_content"]=random.choice(texts)
            msgs.append(a)
    if random.random()<0.1: msgs.append({"role":random.choice(["user","assistant","tool","system"]),"content":content()})
    c={"name":"random","messages":msgs,"add_generation_prompt":random.random()<0.7}
    if random.random()<0.4: c["tools"]=random.choice([tools,tools[:1],[]])
    kw={}
    for k,vals in [("enable_thinking",[True,False]),("reasoning_effort",["low","medium","high"]),("thinking",[True,False]),("keep_past_thinking",[True,False]),("builtin_tools",[["code_interpreter"],["brave_search","wolfram_alpha"]]),("model_identity",["You are X."])]:
        if random.random()<0.2: kw[k]=random.choice(vals)
    if kw: c["chat_template_kwargs"]=kw
    return c
json.dump([conv() for _ in range(N)],open(sys.argv[3],"w"),ensure_ascii=False)
