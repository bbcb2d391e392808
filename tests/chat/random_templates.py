#!/usr/bin/env python3
"""random_templates.py SEED N DIR: N random Jinja templates (DIR/rNNNN.jinja) built from the
language the chat templates use (literals, lists, dicts, variables, members, slices, every
operator, filters with and without arguments, methods, tests, ternaries, if/for/set/macro,
namespaces, white-space control), and DIR/corpus.json, one request whose
chat_template_kwargs gives them values to work on. tests/integration/test_jinja_templates.sh
renders them with the Jinja engine and with @huggingface/jinja: text and refusals must agree.
The same SEED gives the same templates."""
import json
import os
import random
import sys

random.seed(int(sys.argv[1]))
VARS=["x","f","s","l","d","e","u","nothing","messages","ns.v","messages[0].content","messages[-1]","d.a","l[0]","s[1:4]","u[0]","True","none"]
STRS=["'a'","'Hello'","\"x y\"","''","' pad '","'é'","'a,b'","'\\n'","'1'","'2.5'","'[1]'"]
FILT0=["length","upper","lower","trim","first","last","tojson","string","int","float","abs","list","sort","reverse","unique","items","join","title","capitalize","safe","bool","indent","dictsort"]
FILTC=["join(', ')","default('D')","default('D', true)","tojson(indent=2)","tojson(ensure_ascii=true)","int(7)","replace('l','L')","indent(2, true)","sort(reverse=true)","selectattr('role','equalto','user')","map(attribute='role')","rejectattr('content')","tojson(separators=(',', ':'))"]
METH=["strip()","upper()","split()","split(',')","startswith('H')","endswith(('d','x'))","replace('o','0',1)","lstrip()","rstrip()","title()","get('a')","get('zz','dflt')","items()","keys()","values()","capitalize()","split(' ', 1)"]
TESTS=["defined","undefined","none","string","number","integer","iterable","mapping","sequence","odd","even","true","false","boolean","lower","upper","callable"]
OPS=["+","-","*","/","//","%","**","~","==","!=","<",">","<=",">=","and","or","in","not in"]
def atom(d):
    r=random.random()
    if r<0.25: return random.choice(VARS)
    if r<0.4: return str(random.choice([0,1,2,3,-1,7,10,100]))
    if r<0.45: return random.choice(["1.5","0.5","2.0","-0.0","1e3".replace("1e3","1000.0")])
    if r<0.6: return random.choice(STRS)
    if r<0.65: return random.choice(["true","false","none"])
    if r<0.75 and d>0: return "["+", ".join(expr(d-1) for _ in range(random.randint(0,3)))+"]"
    if r<0.8 and d>0: return "{"+", ".join("%s: %s"%(random.choice(STRS),expr(d-1)) for _ in range(random.randint(0,2)))+"}"
    if r<0.85 and d>0: return "("+expr(d-1)+")"
    if r<0.9: return "range(%d)"%random.randint(0,4)
    return random.choice(VARS)
def expr(d=2):
    e=atom(d)
    for _ in range(random.randint(0,2)):
        r=random.random()
        if r<0.3: e="%s|%s"%(e,random.choice(FILT0+FILTC))
        elif r<0.45: e="%s.%s"%(e if not e.lstrip('-').isdigit() else "("+e+")",random.choice(METH))
        elif r<0.6 and d>0: e="%s %s %s"%(e,random.choice(OPS),atom(d-1))
        elif r<0.7: e="%s is %s%s"%(e,random.choice(["","not "]),random.choice(TESTS))
        elif r<0.78 and d>0: e="%s if %s else %s"%(e,atom(d-1),atom(d-1))
        elif r<0.83: e="not %s"%e
        elif r<0.9: e="%s[%s]"%(e,random.choice(["0","-1","1:","::-1",":2","'a'","'role'"]))
    return e
def stmt(d=2):
    r=random.random()
    if r<0.4 or d==0: return "{{ %s }}"%expr()
    if r<0.55: return "{%% if %s %%}%s{%% else %%}%s{%% endif %%}"%(expr(1),block(d-1),block(d-1))
    if r<0.7: return "{%% for it in %s %%}{{ loop.index }}{{ it }}%s{%% endfor %%}"%(random.choice(["l","messages","d","s","range(3)","d.items()","[1,2,3]","x"]),block(d-1))
    if r<0.8: return "{%% set ns.v = %s %%}{{ ns.v }}"%expr(1)
    if r<0.88: return "{%% set t = %s %%}{{ t }}"%expr(1)
    if r<0.94: return "{%% macro m(a, b=2) %%}[{{ a }}{{ b }}]{%% endmacro %%}{{ m(%s) }}{{ m(1, b=%s) }}"%(expr(1),expr(1))
    return random.choice(["  {%- if true -%}  x  {%- endif -%}  ","\n  {% if true %}\ny\n  {% endif %}\n","{# c #}","{{- ' w ' -}}"])
def block(d):
    return "".join(stmt(d) for _ in range(random.randint(1,3)))
N, DIR = int(sys.argv[2]), sys.argv[3]
os.makedirs(DIR, exist_ok=True)
for i in range(N):
    with open(os.path.join(DIR, "r%04d.jinja" % i), "w") as f:
        f.write("{% set ns = namespace(v=0) %}" + block(2))
json.dump([{"name":"vars","messages":[{"role":"system","content":"Sys"},{"role":"user","content":"Hi there"}],"add_generation_prompt":True,
 "chat_template_kwargs":{"x":3,"f":2.5,"s":" Hello World ","l":[3,1,2],"d":{"b":1,"a":[1,2]},"e":"","u":"émoji🙂"}}],open(os.path.join(DIR, "corpus.json"), "w"))
